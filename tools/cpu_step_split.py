"""The host's bookkeeping of a replayed training step, read on a machine without a GPU.

Why (issue 11, docs/engineering/whole-fit-speed.md, session 34): much of a replayed step's host
work is the replay's own bookkeeping around each region (the identity check, the signature, the
copies, the launch, autograd's node and the gradients' hand-off), paid per region in the forward
and again in the backward. On the CPU the replay library's stand-in runs every recorded body
eagerly, but its bookkeeping is the code a GPU fit runs, so the split of a CPU fit tells what a
change to the bookkeeping removes, in calls a step and in host milliseconds, before a GPU is at
hand. The stand-in's own work (the bodies re-run, and copies that move bytes where a GPU only
queues them) is taken out: a region's bookkeeping is ``RegionRecorder.__call__`` less
``RegionGraphs.launch_forward``, plus ``RegionRecorder._launch_backward`` less
``RegionGraphs.launch_backward``.

Each configuration is a fresh process (``lucid-yolo fit`` refuses replay on the CPU, so this
runs :class:`~lucid_yolo.train.YoloModule` under a Lightning trainer itself), alternating over
``--rounds``; each fit is split from its second epoch by ``host_split_callback.py``. The
numbers are the dev machine's: they rank and count, they do not time a GPU fit.

Run (from the repository root)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):tools python3 tools/cpu_step_split.py \\
        --configs chain,one-region --rounds 2 --out cpu_step_split.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CONFIGS: dict[str, dict[str, bool]] = {
    "chain": {"network": True, "loss": True, "update": True, "loss_with_network": False},
    "one-region": {"network": True, "loss": True, "update": True, "loss_with_network": True},
}
"""The replay options of each configuration a run can compare."""

COUNTED = (
    "RegionRecorder.__call__",
    "RegionRecorder._launch_backward",
    "Binding.check",
    "Binding.signature",
    "recorder.route",
    "_autograd.copy_grouped",
    "GradientRecycler.take",
    "SharingProbe.arm",
    "autograd.backward",
)
"""Rows reported as they are, in milliseconds and calls a step."""


def bookkeeping_ms(rows: dict[str, dict[str, float]]) -> float:
    """A step's region bookkeeping on the host: the regions' calls and backward launches less
    what the stand-in runs in their place."""

    def ms(name: str) -> float:
        return rows.get(name, {}).get("ms_per_step", 0.0)

    return (
        ms("RegionRecorder.__call__")
        - ms("RegionGraphs.launch_forward")
        + ms("RegionRecorder._launch_backward")
        - ms("RegionGraphs.launch_backward")
    )


def static_bytes(recorders: list[Any]) -> int:
    """Bytes of the region recorders' static buffers, each storage once: inputs, incoming
    gradients, outputs and the gradients the backward graphs write (the parameters' too). On the
    CPU they are plain tensors; on a GPU the outputs and gradients sit in the graphs' pool."""
    storages: dict[int, int] = {}
    for recorder in recorders:
        for recording in recorder._recordings.values():
            graphs = recording.graphs
            tensors = [
                *recording.static_inputs,
                *recording.static_grad_outputs.values(),
                *graphs.static_outputs,
                *(g for grads in graphs.static_grads.values() for g in grads if g is not None),
                *graphs.parameter_grads,
            ]
            for tensor in tensors:
                storage = tensor.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """What a run compares of one fit's split: the wall clock and the bookkeeping a step, the
    counted rows, the replay counters, the static buffers' bytes."""
    rows = {row["function"]: row for row in report["rows"]}
    return {
        "wall_ms_per_step": report["wall_ms_per_step"],
        "bookkeeping_ms_per_step": round(bookkeeping_ms(rows), 3),
        "static_bytes": report.get("static_bytes"),
        "rows": {
            name: {k: rows[name][k] for k in ("ms_per_step", "calls_per_step")}
            for name in COUNTED
            if name in rows
        },
        "replay": report["replay"].get("all", {}),
    }


def child(config: str, data: Path, args: argparse.Namespace) -> None:
    """One fit of ``config``, split from its second epoch into the file ``$LUCID_HOST_SPLIT``
    names, with the static buffers' bytes added."""
    import lightning.pytorch as pl

    from host_split_callback import RESULT_ENV, HostSplitCallback
    from lucid_yolo.models.registry import TASK_SUFFIXES
    from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule

    pl.seed_everything(0, verbose=False)
    datamodule = YoloDataModule(
        data, task=args.task, imgsz=args.imgsz, batch_size=args.batch, workers=0, seed=0
    )
    module = YoloModule(
        f"yolo26n{TASK_SUFFIXES[args.task]}",
        num_classes=datamodule.num_classes,
        replay=ReplayConfig(**CONFIGS[config]),
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=args.epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[HostSplitCallback(first_epoch=1)],
    )
    trainer.fit(module, datamodule)
    result = Path(os.environ[RESULT_ENV])
    report = json.loads(result.read_text())
    report["static_bytes"] = static_bytes(module.replay.recorders())
    result.write_text(json.dumps(report, indent=1) + "\n")


def parser() -> argparse.ArgumentParser:
    """The command line (a configuration's fit reads its settings from it too)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="chain,one-region", help="comma-separated")
    parser.add_argument("--task", default="detect", choices=("detect", "segment", "pose", "obb"))
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--imgsz", type=int, default=64)
    parser.add_argument("--images", type=int, default=32, help="training images")
    parser.add_argument("--epochs", type=int, default=3, help="the first is not split")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("cpu_step_split.json"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    command = parser()
    args = command.parse_args(argv)
    if args.child:
        child(args.child, args.data, args)
        return 0
    configs = args.configs.split(",")
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown:
        command.error(f"unknown configuration(s) {unknown}: choose from {sorted(CONFIGS)}")
    from lucid_yolo.train.data.synthetic import generate_synthetic

    fits: dict[str, list[dict[str, Any]]] = {config: [] for config in configs}
    with tempfile.TemporaryDirectory() as folder:
        data = generate_synthetic(
            Path(folder) / "data",
            task=args.task,
            num_train=args.images,
            num_val=4,
            imgsz=max(64, args.imgsz),
        )
        for round_ in range(args.rounds):
            order = configs if round_ % 2 == 0 else configs[::-1]
            for config in order:
                result = Path(folder) / f"{config}-{round_}.json"
                fit = [
                    sys.executable, __file__, "--child", config, "--data", str(data),
                    "--task", args.task, "--batch", str(args.batch),
                    "--imgsz", str(args.imgsz), "--epochs", str(args.epochs),
                ]  # fmt: skip
                environment = {**os.environ, "LUCID_HOST_SPLIT": str(result)}
                subprocess.run(fit, check=True, capture_output=True, env=environment)
                fits[config].append(summary(json.loads(result.read_text())))
    report = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("child", "data")},
        "fits": fits,
        "median": {
            config: {
                key: statistics.median(fit[key] for fit in runs)
                for key in ("wall_ms_per_step", "bookkeeping_ms_per_step", "static_bytes")
            }
            for config, runs in fits.items()
        },
    }
    args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    for config, runs in fits.items():
        median = report["median"][config]
        print(
            f"{config}: bookkeeping {median['bookkeeping_ms_per_step']:.3f} ms a step "
            f"(wall {median['wall_ms_per_step']:.1f} ms, stand-in included); static buffers "
            f"{median['static_bytes'] / 2**20:.2f} MiB"
        )
        for name, row in runs[-1]["rows"].items():
            print(f"  {name}: {row['calls_per_step']:g} calls, {row['ms_per_step']:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
