"""The training thread's cost of a fit's checkpoints, split into its parts.

``tools/probe_fit_gap.py`` measured 0.42-0.48 s per epoch in ``Trainer.save_checkpoint`` on the
H200 (detect yolo26n, batch 16, replayed; session 9), as much as before the checkpoints were
written on a background thread (0.385 s in session 8). This tool says where that time goes. It
runs the benchmark's own fit (``bench_side_by_side.lucid_fit_arguments``: the packaged config,
MuSGD and the EMA as the CLI builds them, the CLI's ``best`` and ``last`` checkpoints) once per
mode (:data:`MODES`: background writes on, off, on with a dump for every save as before
session 9, and on with the writer thread under a 0.5 ms thread switch interval), and adds one
callback, :class:`CheckpointCost`, that times on
the training thread each ``Trainer.save_checkpoint`` (``total_s``) split into

* ``dump_s``: Lightning's ``dump_checkpoint`` (everything before the checkpoint IO: the module's
  ``state_dict`` (``module_state_s``, also counted in ``dump_s``), the optimizer's, the loops',
  the callbacks', the hooks);
* ``snapshot_s``: :func:`~lucid_yolo.train.checkpoint_snapshot.host_snapshot` (the
  copy of every tensor that the file is written from);
* ``rest_s``: the rest of the checkpoint IO: handing the write to the writer thread, or the
  write itself with the background off;

and, for the background writes, how much the writer thread slows the training thread: each
training step's period (one batch end to the next, within an epoch) is compared with and
without a write running on the writer thread meanwhile (``slowed_s``: the overlapping steps'
excess over the median of the others). The writer thread's own time (``writer_ms`` per save:
filling the snapshot in, serialising, linking) is timed where it runs.

Run (GPU machine, from source; ``$OUT/checkpoint_cost.json`` and ``.md``)::

    python3 tools/probe_checkpoint_cost.py --batch 16 --epochs 4 --images 128 --val-images 16

``--improving`` counts every epoch as the best so far (``best.ckpt`` saved every epoch, as in the
benchmark's 640 px fits, where the mAP rises every epoch). ``--snapshot-of <file.ckpt>`` times
only the host snapshot and its fill on a checkpoint file, its tensors on the machine's device
(median of 9 calls each).

On a machine without CUDA the fits run on the CPU, natively (the CLI refuses replay there; a
smoke test: ``--imgsz 64 --images 8 --val-images 4 --epochs 2 --batch 2``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial, wraps
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

COST_ENV = "LUCID_CHECKPOINT_COST"
"""Environment variable naming the JSON file :class:`CheckpointCost` writes."""
BACKGROUND_ENV = "LUCID_CHECKPOINT_BACKGROUND"
"""``on`` or ``off``: whether :class:`CheckpointCost` leaves the background writes on."""
IMPROVING_ENV = "LUCID_CHECKPOINT_IMPROVING"
"""When set, :class:`CheckpointCost` has every epoch's fitness count as an improvement (the best
score so far forgotten before ``best.ckpt``'s callback compares), so that ``best.ckpt`` is saved
every epoch as in the GPU benchmark's fits (a small CPU fit's mAP stays 0)."""
TOOLS_DIR = Path(__file__).resolve().parent
DUMP_EACH_ENV = "LUCID_CHECKPOINT_DUMP_EACH"
"""When set, :class:`CheckpointCost` has every save dump, as Lightning's own ``Trainer`` does
(the CLI's :class:`~lucid_yolo.train.YoloTrainer` dumps once per moment): the cost before
session 9's change, in the same code."""
WRITER_SWITCH_ENV = "LUCID_CHECKPOINT_WRITER_SWITCH_INTERVAL"
"""When set (seconds), :class:`CheckpointCost` runs the writer thread's jobs under that thread
switch interval (``sys.setswitchinterval``: process-wide while a job runs), CPython's 5 ms put
back after each: whether the GIL's hand-over is what slows the steps a write overlaps. On the dev
CPU a busy thread lost about 145 ms to one write at 5 ms and 3-12 ms at 0.5 ms
(``tools/probe_writer_gil.py``, session 17); on the H200 the overlapped steps of a replayed
detect-b16 fit lost 2.5 s in 60 saves (session 18), and 0.5 ms did not give them back (session
19: 38.4 and 41.7 ms a save against 30.9 and 38.3 ms at 5 ms)."""
MODES = {
    "background": {BACKGROUND_ENV: "on"},
    "foreground": {BACKGROUND_ENV: "off"},
    "dump-each": {BACKGROUND_ENV: "on", DUMP_EACH_ENV: "1"},
    "background-switch": {BACKGROUND_ENV: "on", WRITER_SWITCH_ENV: "0.0005"},
}
"""The fits a run compares: background writes on and off, a dump for every save, and the
background writes under a 0.5 ms switch interval."""


def _timed(record: Callable[[float, float], None], function: Callable[..., Any]) -> Any:
    """``function`` that also calls ``record(began, ended)`` (``perf_counter``) after each call."""

    @wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            record(began, time.perf_counter())

    return timed


def _switching(interval: float, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` that, called off the main thread, runs under the thread switch interval
    ``interval`` and puts the previous one back."""

    from probe_writer_gil import switch_interval

    @wraps(function)
    def switching(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is threading.main_thread():
            return function(*args, **kwargs)
        with switch_interval(interval):
            return function(*args, **kwargs)

    return switching


class CheckpointCost(pl.Callback):
    """Times every checkpoint save on the training thread, and every training step.

    Add it to a CLI fit with ``--trainer.callbacks+=probe_checkpoint_cost.CheckpointCost``
    (``tools/`` on ``PYTHONPATH``, the output file in ``$LUCID_CHECKPOINT_COST``, the writes in
    the background unless ``$LUCID_CHECKPOINT_BACKGROUND`` is ``off``). It synchronises nothing
    and changes nothing the fit computes or writes.
    """

    def __init__(self) -> None:
        self.saves: list[dict[str, Any]] = []
        self.writes: list[tuple[float, float]] = []
        self.steps: list[tuple[float, float]] = []
        self._parts: dict[str, float] = {}
        self._last_end: float | None = None
        self._background = os.environ.get(BACKGROUND_ENV, "on") != "off"
        self._improving = bool(os.environ.get(IMPROVING_ENV))
        self.epochs = 0

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        from lucid_yolo.train.callbacks import atomic_checkpoint_io as io_module

        def part(name: str) -> Callable[[float, float], None]:
            def record(began: float, ended: float) -> None:
                if threading.current_thread() is threading.main_thread():
                    self._parts[name] = self._parts.get(name, 0.0) + ended - began

            return record

        def save_done(began: float, ended: float) -> None:
            parts, self._parts = self._parts, {}
            io_s = parts.get("io_s", 0.0)
            snapshot_s = parts.get("snapshot_s", 0.0)
            self.saves.append(
                {
                    "step": trainer.global_step,
                    "total_s": ended - began,
                    "dump_s": ended - began - io_s,
                    "module_state_s": parts.get("module_state_s", 0.0),
                    "snapshot_s": snapshot_s,
                    "rest_s": io_s - snapshot_s,
                }
            )

        if os.environ.get(DUMP_EACH_ENV):
            save = _timed(save_done, partial(pl.Trainer.save_checkpoint, trainer))
        else:
            save = _timed(save_done, trainer.save_checkpoint)

        def parted_save(*args: Any, **kwargs: Any) -> Any:
            self._parts = {}  # what ran on this thread since the last save is not this save's
            return save(*args, **kwargs)

        trainer.save_checkpoint = parted_save  # type: ignore[method-assign]
        strategy = trainer.strategy
        strategy.save_checkpoint = _timed(part("io_s"), strategy.save_checkpoint)  # type: ignore[method-assign]
        pl_module.state_dict = _timed(part("module_state_s"), pl_module.state_dict)  # type: ignore[method-assign]
        io = strategy.checkpoint_io
        if isinstance(io, io_module.AtomicCheckpointIO):  # a save repeating the previous dump
            io.save_again = _timed(part("io_s"), io.save_again)  # type: ignore[method-assign]
        io_module.host_snapshot = _timed(part("snapshot_s"), io_module.host_snapshot)  # type: ignore[attr-defined]
        interval = os.environ.get(WRITER_SWITCH_ENV)
        for job in ("fill", "atomic_save", "atomic_link"):  # what the writer thread runs
            function = getattr(io_module, job)
            if interval:
                function = _switching(float(interval), function)
            setattr(io_module, job, _timed(self._writing, function))

    def _writing(self, began: float, ended: float) -> None:
        """Keep a write's interval: on the writer thread, where a save overlaps the steps."""
        if threading.current_thread() is not threading.main_thread():
            self.writes.append((began, ended))

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from lucid_yolo.train.callbacks import AtomicCheckpointIO

        io = trainer.strategy.checkpoint_io
        if isinstance(io, AtomicCheckpointIO):
            io.background = io.background and self._background

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_end = None
        self.epochs += 1

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # before the checkpoint callbacks' on_validation_end (Lightning runs them last): the
        # best score so far forgotten, so that this epoch's is an improvement
        if self._improving and not trainer.sanity_checking:
            import torch
            from lightning.pytorch.callbacks import ModelCheckpoint

            for callback in trainer.checkpoint_callbacks:
                if isinstance(callback, ModelCheckpoint) and callback.monitor is not None:
                    best = callback.kth_best_model_path
                    if best in callback.best_k_models:
                        callback.best_k_models[best] = torch.tensor(float("-inf"))

    def on_train_batch_end(self, *_: Any) -> None:
        now = time.perf_counter()
        if self._last_end is not None:
            self.steps.append((self._last_end, now))
        self._last_end = now

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from lucid_yolo.train.callbacks import AtomicCheckpointIO

        io = trainer.strategy.checkpoint_io
        if isinstance(io, AtomicCheckpointIO):
            io.wait()  # every write timed before the record is written
        path = os.environ.get(COST_ENV)
        if path and trainer.is_global_zero:
            record = {
                "epochs": self.epochs,
                "saves": self.saves,
                "writes": self.writes,
                "steps": self.steps,
            }
            Path(path).write_text(json.dumps(record) + "\n")


SAVE_PARTS = ("total_s", "dump_s", "module_state_s", "snapshot_s", "rest_s")


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """Per save: the parts' medians (the fit's first save, at start-up, stays out) and the
    writer thread's mean time; per step: the median period with and without a write meanwhile,
    and the overlapping steps' excess in all."""
    saves = record["saves"][1:] or record["saves"]
    writer_s = sum(ended - began for began, ended in record["writes"])
    dumped = [s for s in saves if s["module_state_s"] > 0] or saves
    repeats = [s for s in saves if s["module_state_s"] == 0]

    def overlaps(step: list[float]) -> bool:
        return any(began < step[1] and step[0] < ended for began, ended in record["writes"])

    periods = {True: [], False: []}  # type: dict[bool, list[float]]
    for step in record["steps"]:
        periods[overlaps(step)].append(step[1] - step[0])
    free_ms = statistics.median(periods[False]) * 1000.0 if periods[False] else float("nan")
    slowed_s = sum(p - free_ms / 1000.0 for p in periods[True]) if periods[False] else 0.0
    epochs = max(record["epochs"] - 1, 1)
    return {
        "saves": len(record["saves"]),
        "dumps": sum(s["module_state_s"] > 0 for s in record["saves"]),
        "save_ms_per_epoch": sum(s["total_s"] for s in saves) * 1000.0 / epochs,
        "per_save_ms": {  # the saves that dumped
            part: statistics.median(s[part] for s in dumped) * 1000.0 for part in SAVE_PARTS
        },
        "repeat_ms": statistics.median(s["total_s"] for s in repeats) * 1000.0 if repeats else 0.0,
        "writer_ms": writer_s * 1000.0 / max(len(record["saves"]), 1),
        "step_ms": free_ms,
        "overlapped_steps": len(periods[True]),
        "overlapped_step_ms": (
            statistics.median(periods[True]) * 1000.0 if periods[True] else float("nan")
        ),
        "slowed_s": slowed_s,
        "slowed_ms_per_save": slowed_s * 1000.0 / max(len(record["saves"]), 1),
    }


def table(results: dict[str, dict[str, Any]]) -> str:
    """A markdown table of each mode's summary, in ms."""
    lines = [
        "| writes | saves (dumps) | per epoch | save | dump | module state | snapshot | rest | "
        "repeat | writer | step | steps overlapped (median) | slowed per save |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, result in results.items():
        per = result["per_save_ms"]
        lines.append(
            f"| {mode} | {result['saves']} ({result['dumps']}) | "
            f"{result['save_ms_per_epoch']:.1f} | "
            + " | ".join(f"{per[part]:.1f}" for part in SAVE_PARTS)
            + f" | {result['repeat_ms']:.1f} | {result['writer_ms']:.1f} | "
            f"{result['step_ms']:.1f} | "
            f"{result['overlapped_steps']} ({result['overlapped_step_ms']:.1f}) | "
            f"{result['slowed_ms_per_save']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def snapshot_cost(path: Path, repeats: int) -> dict[str, float]:
    """The median ms of ``host_snapshot`` and of ``fill`` over ``repeats`` calls each, on the
    checkpoint file ``path`` with its tensors on this machine's device (CUDA when there is one)."""
    import torch
    from lightning_utilities.core.apply_func import apply_to_collection

    from lucid_yolo.train.checkpoint_snapshot import fill, host_snapshot

    device = "cuda" if torch.cuda.is_available() else "cpu"
    saved = torch.load(path, weights_only=True)
    checkpoint = apply_to_collection(saved, torch.Tensor, lambda t: t.to(device))

    def median_ms(call: Callable[[], Any]) -> float:
        times = []
        for _ in range(repeats):
            began = time.perf_counter()
            call()
            times.append(time.perf_counter() - began)
        return statistics.median(times) * 1000.0

    layout, copies = host_snapshot(checkpoint)
    return {
        "host_snapshot_ms": median_ms(lambda: host_snapshot(checkpoint)),
        "fill_ms": median_ms(lambda: fill(layout, copies)),
    }


def main() -> None:
    import torch

    from bench_side_by_side import lucid_fit_arguments, synthetic_set

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--val-images", type=int, default=32)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--native", action="store_true", help="the native fit, not the replayed")
    parser.add_argument(
        "--improving", action="store_true", help="every epoch's fitness the best so far"
    )
    parser.add_argument(
        "--modes", nargs="+", choices=list(MODES), default=list(MODES), help="the fits to run"
    )
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-probe-checkpoint-cost"))
    parser.add_argument(
        "--snapshot-of",
        type=Path,
        help="instead of the fits: time host_snapshot and fill on this checkpoint file",
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    if args.snapshot_of is not None:
        print(json.dumps(snapshot_cost(args.snapshot_of, repeats=9)))
        return
    data_yaml = synthetic_set(args.root, "detect", args.images, args.val_images, args.imgsz)
    args.out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    results: dict[str, dict[str, Any]] = {}
    for mode in args.modes:
        record_path = args.out / f"checkpoint_cost_{mode}.json"
        command = [
            sys.executable, "-m", "lucid_yolo.cli", "fit",
            *lucid_fit_arguments(
                "detect", data_yaml, args.out / f"run-{mode}", batch=args.batch,
                imgsz=args.imgsz, epochs=args.epochs, replay=cuda and not args.native,
                cpu=not cuda,
            ),
            "--trainer.callbacks+=probe_checkpoint_cost.CheckpointCost",
        ]  # fmt: skip
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TOOLS_DIR), env.get("PYTHONPATH")]))
        env[COST_ENV] = str(record_path)
        env.update(MODES[mode])
        if args.improving:
            env[IMPROVING_ENV] = "1"
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        (args.out / f"checkpoint_cost_{mode}.log").write_text(
            done.stdout[-20000:] + done.stderr[-20000:]
        )
        if done.returncode != 0:
            raise SystemExit(f"the {mode} fit failed ({done.returncode}): {done.stderr[-2000:]}")
        results[mode] = summary(json.loads(record_path.read_text()))
        result = {
            "batch": args.batch,
            "imgsz": args.imgsz,
            "device": torch.cuda.get_device_name() if cuda else "cpu",
            "replay": cuda and not args.native,
            **results,
        }
        # after each fit: a run cut short keeps the fits it finished
        (args.out / "checkpoint_cost.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / "checkpoint_cost.md").write_text(table(results))
    print(table(results), end="")


if __name__ == "__main__":
    main()
