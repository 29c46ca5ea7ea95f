"""Count the host synchronisations of a replayed fit's step loop, by call site, and its period.

A replayed step should be: copy the batch in, launch the graphs, return. Any synchronisation on
the way (``.item()``, a device-to-host copy, ``nonzero``, a Python float logged to a CUDA
module) makes the host wait for the GPU, so the next batch's fetch and the loop's own host work
add to the step instead of overlapping it. This tool runs a short fit with every replay region on,
with the ``lucid-yolo fit`` defaults (bf16, its callbacks, the progress bar, the CSV logger,
checkpoints; ``--bare`` drops all but the fit), and from the second epoch on watches the **whole
step loop** with torch's synchronisation debug mode: from one batch's start to the next (the
step, the schedule, the batch-end callbacks and logging, the next batch's fetch), off during
validation and epoch turnover. It prints every distinct call site (the frames inside lucid_yolo
and Lightning) with how often it fired per step, the median period between batch starts, and
how many of the non-finite loss guard's late checks had to wait for the GPU (an event wait,
which the debug mode does not see), and the size of the update's backup.

``--check now`` makes the guard read each step's verdict before the update, as native fits do
(one synchronisation per step), for a before/after comparison on the same code.

Run (GPU machine, repository root)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 tools/find_host_syncs.py --batch 16
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger

from lucid_yolo.cli.lightning_cli import trainer_defaults
from lucid_yolo.cli.progress_bar import RunProgressBar
from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
from lucid_yolo.train.callbacks import AtomicCheckpointIO
from lucid_yolo.train.data.dataset_yaml import Task
from lucid_yolo.train.data.synthetic import generate_synthetic
from row_replay import TRAINING_REPLAY

Site = tuple[str, ...]

SYNC_WARNING = "called a synchronizing CUDA operation"
"""What torch's debug mode warns at a synchronisation. Switching the mode on also warns, once per
process, that it "does not yet detect all synchronizing operations": that notice is no sync."""


class SyncRecorder(pl.Callback):
    """Counts synchronisations of the step loop from epoch ``first_epoch`` on, by call site.

    The watch starts at a batch's start and runs until validation or the epoch's end, so each
    step is seen from its batch's start to the next one's. Batch starts are timed too.
    """

    def __init__(self, first_epoch: int = 1) -> None:
        self.first_epoch = first_epoch
        self.sites: collections.Counter[Site] = collections.Counter()
        self.steps = 0
        self.periods_ms: list[float] = []
        self._last_start: float | None = None
        self._watching = False
        self._previous = warnings.showwarning

    def _record(self, message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        if self._watching and SYNC_WARNING in str(message):
            frames = traceback.extract_stack()[:-2]
            ours = [
                f"{Path(f.filename).name}:{f.lineno} {f.name}"
                for f in frames
                if "lucid_yolo" in f.filename or "lightning" in f.filename
            ]
            self.sites[tuple(ours[-4:])] += 1
            return
        self._previous(message, category, *args, **kwargs)

    def on_train_batch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        if trainer.current_epoch < self.first_epoch:
            return
        now = time.perf_counter()
        if self._last_start is not None:
            self.periods_ms.append((now - self._last_start) * 1000.0)
        self._last_start = now
        self.steps += 1
        if not self._watching:
            self._watching = True
            warnings.showwarning = self._record
            if torch.cuda.is_available():
                torch.cuda.set_sync_debug_mode("warn")

    def on_validation_start(self, *_: Any) -> None:
        self._stop()

    def on_train_epoch_end(self, *_: Any) -> None:
        self._stop()

    def _stop(self) -> None:
        self._last_start = None
        if self._watching:
            if torch.cuda.is_available():
                torch.cuda.set_sync_debug_mode("default")
            warnings.showwarning = self._previous
            self._watching = False


def _callbacks(bare: bool) -> list[Callback]:
    """``lucid-yolo fit``'s callbacks and progress bar, or none."""
    if bare:
        return []
    callbacks: list[Callback] = list(trainer_defaults("fit")["callbacks"])
    return [*callbacks, RunProgressBar()]


class _CheckNow(pl.Callback):
    """The guard reads each step's verdict before its update (as a native update does)."""

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        assert isinstance(pl_module, YoloModule)
        if pl_module.update_step is not None:
            pl_module.update_step.backup = None


def _backup_bytes(module: YoloModule) -> int:
    step = module.update_step
    return 0 if step is None or step.backup is None else step.backup.nbytes


def watched_fit(
    root: Path,
    *,
    task: Task = "detect",
    batch: int = 16,
    imgsz: int = 640,
    images: int = 64,
    epochs: int = 3,
    check: str = "late",
    bare: bool = False,
    accelerator: str = "gpu",
) -> dict[str, Any]:
    """Run the watched fit under ``root``; the counts, the period and the sites as a dict."""
    data = generate_synthetic(root, task=task, num_train=images, num_val=8, imgsz=imgsz)
    dm = YoloDataModule(data, task=task, imgsz=imgsz, batch_size=batch)
    suffix = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}[task]
    module = YoloModule(
        f"yolo26n{suffix}",
        num_classes=dm.num_classes,
        replay=ReplayConfig(**TRAINING_REPLAY),
    )
    recorder = SyncRecorder()
    callbacks = _callbacks(bare)
    if check == "now":
        callbacks.append(_CheckNow())
    gpu = accelerator == "gpu"
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=1,
        precision="bf16-mixed" if gpu else "32-true",
        max_epochs=epochs,
        default_root_dir=root,
        logger=False if bare else CSVLogger(root),
        enable_checkpointing=not bare,
        enable_progress_bar=not bare,
        enable_model_summary=False,
        plugins=None if bare else [AtomicCheckpointIO()],
        callbacks=[*callbacks, recorder],
    )
    trainer.fit(module, dm)
    syncs = sum(recorder.sites.values())
    steps = max(1, recorder.steps)
    period = statistics.median(recorder.periods_ms) if recorder.periods_ms else None
    return {
        "task": task,
        "batch": batch,
        "check": check,
        "bare": bare,
        "steps": recorder.steps,
        "syncs": syncs,
        "syncs_per_step": syncs / steps,
        "period_ms_median": None if period is None else round(period, 2),
        "images_per_s": None if period is None else round(batch * 1000.0 / period, 1),
        "guard_waits": module.loss_guard.waits,
        "backup_mib": round(_backup_bytes(module) / 2**20, 1),
        "sites": [
            {"per_step": count / steps, "site": list(site)}
            for site, count in recorder.sites.most_common()
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default="detect")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3, help="the first one is not watched")
    parser.add_argument("--check", choices=("late", "now"), default="late")
    parser.add_argument("--bare", action="store_true", help="no callbacks, logger, checkpoints")
    parser.add_argument("--accelerator", default="gpu", help="cpu: a smoke run, no counting")
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON")
    args = parser.parse_args()
    warnings.simplefilter("always")
    result = watched_fit(
        Path(tempfile.mkdtemp(prefix="host-syncs-")),
        task=args.task,
        batch=args.batch,
        imgsz=args.imgsz,
        images=args.images,
        epochs=args.epochs,
        check=args.check,
        bare=args.bare,
        accelerator=args.accelerator,
    )
    print(
        f"{result['steps']} steps watched; {result['syncs']} synchronisations "
        f"({result['syncs_per_step']:.2f}/step); step period {result['period_ms_median']} ms "
        f"(median); guard waits {result['guard_waits']}; backup {result['backup_mib']} MiB"
    )
    for row in result["sites"]:
        print(f"{row['per_step']:6.2f}/step  " + "  <-  ".join(reversed(row["site"])))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
