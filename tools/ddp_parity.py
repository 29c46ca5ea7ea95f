"""DDP parity: a multi-GPU fit with replay against the same fit without, bitwise, on every rank.

Each case (task x precision x accumulation) runs two short seeded DDP fits on a tiny synthetic
set, one native and one replayed (``--regions``; by default every region that applies to the
task: network, segment heads, loss, update), in the same torchrun launch. Every rank digests its
weights and buffers, EMA, optimizer, LR schedule and GradScaler, and keeps the bits of each
step's loss and of the validation metrics. The parent compares, per rank, replay against
native, and the ranks' weights with each other (equal weights show the gradients were
all-reduced), and checks that every region replayed and none retired.

Writes one JSON file with a row per case and prints a line per case; exit status 1 if any case
differs. NVLink multicast stays off (tools/multi_gpu_env.py).

Example (2-GPU machine, from the repository root, deterministic cuBLAS)::

    export PYTHONPATH=$(ls -d packages/*/src | paste -sd:)
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 tools/ddp_parity.py \\
        --devices 2 --out $OUT/ddp_parity.json

``--accelerator cpu --precisions 32-true`` runs the same comparison on two gloo processes
(the replay regions use their CPU stand-in there).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from multi_gpu_env import multicast_off, run_group

if TYPE_CHECKING:
    from lucid_yolo.train.data.dataset_yaml import Task

multicast_off()

TASKS = ("detect", "segment")
REGIONS = ("network", "segment_heads", "loss", "update")
SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}
STEPS = 4


def _case_name(task: str, precision: str, accumulation: int) -> str:
    return f"{task}/{precision}/acc{accumulation}"


# --------------------------------------------------------------------- one rank (under torchrun)


def _rank_fit(args: argparse.Namespace, task: Task, precision: str, acc: int, replay: bool) -> Any:
    import lightning.pytorch as pl

    from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
    from parity_matrix import Record, fit_state_digests

    pl.seed_everything(0)
    yaml = Path(args.root) / task / "data.yaml"
    data = YoloDataModule(yaml, task=task, imgsz=64, batch_size=2, workers=0, max_instances=16)
    regions = set(args.regions)
    options = ReplayConfig(
        network=replay and "network" in regions,
        segment_heads=replay and "segment_heads" in regions and task == "segment",
        loss=replay and "loss" in regions,
        update=replay and "update" in regions,
    )
    shape = data.spec.kpt_shape
    module = YoloModule(
        f"yolo26n{SUFFIX[task]}",
        num_classes=data.num_classes,
        kpt_shape=(17, 3) if shape is None else (shape[0], 3),
        warmup_epochs=0.0,
        ema_tau=3.0,
        replay=options,
    )
    record = Record()
    trainer = pl.Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy="ddp",
        precision=precision,  # type: ignore[arg-type]
        max_steps=STEPS,
        accumulate_grad_batches=acc,
        val_check_interval=2,
        check_val_every_n_epoch=None,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        deterministic=args.accelerator != "cpu",
        benchmark=False,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[record],
    )
    trainer.fit(module, data)
    recorders = module.replay_recorders()
    return {
        "digests": fit_state_digests(trainer, module),
        "losses": record.losses,
        "val": record.val,
        "replays": {r.name: r.telemetry.replays for r in recorders},
        "retired": {r.name: r.telemetry.as_dict()["retirements"] for r in recorders},
    }


def run_rank(args: argparse.Namespace) -> None:
    """Every case's native and replayed fit on this rank; one JSON file per rank."""
    rank = int(os.environ.get("RANK", "0"))
    results: dict[str, Any] = {}
    for task, precision, acc in itertools.product(args.tasks, args.precisions, args.accumulations):
        name = _case_name(task, precision, acc)
        try:
            results[name] = {
                mode: _rank_fit(
                    args, task, precision, acc, replay=mode == "replay" and not args.control
                )
                for mode in ("native", "replay")
            }
        except Exception as error:  # a failing case is a row, not the end of the run
            results[name] = {"error": repr(error)}
        (Path(args.root) / f"rank{rank}.json").write_text(json.dumps(results))


# --------------------------------------------------------------------- the parent


def _row(name: str, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    from lucid_yolo.replay import first_difference

    errors = [r[name].get("error") for r in ranks if name in r and "error" in r[name]]
    if errors or any(name not in r for r in ranks):
        return {"case": name, "passed": False, "error": errors or "a rank did not finish"}
    per_rank = []
    for rank, result in enumerate(ranks):
        native, replay = result[name]["native"], result[name]["replay"]
        per_rank.append(
            {
                "rank": rank,
                "first_difference": first_difference(native["digests"], replay["digests"]),
                "losses_equal": native["losses"] == replay["losses"],
                "first_loss_difference": next(
                    (
                        i
                        for i, (a, b) in enumerate(
                            zip(native["losses"], replay["losses"], strict=False)
                        )
                        if a != b
                    ),
                    None,
                ),
                "micro_batches": len(native["losses"]),
                "val_equal": native["val"] == replay["val"] and len(native["val"]) > 0,
                "replays": replay["replays"],
                "retired": replay["retired"],
            }
        )
    weights = [
        {k: v for k, v in r[name]["native"]["digests"].items() if k.startswith("model.")}
        for r in ranks
    ]
    synced = {k for k in weights[0] if "running_" not in k and "num_batches" not in k}
    ranks_agree = all(
        {k: w[k] for k in synced} == {k: weights[0][k] for k in synced} for w in weights
    )
    passed = ranks_agree and all(
        r["first_difference"] is None
        and r["losses_equal"]
        and r["val_equal"]
        and all(count > 0 for count in r["replays"].values())
        and not any(r["retired"].values())
        for r in per_rank
    )
    return {"case": name, "passed": passed, "ranks_agree": ranks_agree, "ranks": per_rank}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("ddp_parity.json"))
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(SUFFIX))
    parser.add_argument("--precisions", nargs="+", default=["bf16-mixed"])
    parser.add_argument("--accumulations", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--accelerator", default="gpu")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds for all cases; cut ones fail"
    )
    parser.add_argument(
        "--regions",
        nargs="+",
        default=list(REGIONS),
        choices=REGIONS,
        help="what the replayed fit replays, each where the task allows it",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="run both fits natively: is native DDP itself reproducible here?",
    )
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        if args.accelerator != "cpu":
            import torch

            torch.backends.cudnn.deterministic = True
            torch.use_deterministic_algorithms(True)
        run_rank(args)
        return 0
    from lucid_yolo.train.data.synthetic import generate_synthetic

    begin = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for task in args.tasks:
            root = Path(tmp) / task
            generate_synthetic(root, task=task, num_train=8, num_val=2, imgsz=128, seed=0)
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={args.devices}",
            __file__,
            "--rank",
            "--root",
            tmp,
            "--accelerator",
            args.accelerator,
            "--devices",
            str(args.devices),
            "--tasks",
            *args.tasks,
            "--precisions",
            *args.precisions,
            "--accumulations",
            *map(str, args.accumulations),
            *(["--control"] if args.control else []),
            "--regions",
            *args.regions,
        ]
        launched = run_group(command, args.timeout)
        ranks = [
            json.loads(path.read_text()) if path.is_file() else {}
            for path in (Path(tmp) / f"rank{r}.json" for r in range(args.devices))
        ]
    names = [
        _case_name(*case)
        for case in itertools.product(args.tasks, args.precisions, args.accumulations)
    ]
    rows = [_row(name, ranks) for name in names]
    for row in rows:
        print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "devices": args.devices,
        "accelerator": args.accelerator,
        "launch_status": launched.returncode,
        "seconds": round(time.perf_counter() - begin, 1),
        "rows": rows,
    }
    args.out.write_text(json.dumps(summary, indent=1))
    failed = [r["case"] for r in rows if not r["passed"]]
    print(f"{len(rows) - len(failed)}/{len(rows)} cases bitwise on every rank; failed: {failed}")
    return 1 if failed or launched.returncode else 0


if __name__ == "__main__":
    raise SystemExit(main())
