"""A Lightning callback that records where a `lucid-yolo fit` spends its time, for the benchmarks.

`tools/bench_side_by_side.py` adds it to a CLI fit with
``--trainer.callbacks+=bench_probe.FitProbe`` (``tools/`` on ``PYTHONPATH``) and names the JSON
file to write in ``LUCID_BENCH_PROBE``. The callback is not part of any package: it measures, it
changes nothing the fit computes. It reads the clock at hook boundaries only; the one device
synchronisation is at the end of the fit.

Recorded: seconds from process start to the first training batch (start-up), split at the
marks ``startup_marks`` lists (seconds from process start: the probe built, i.e. imports and the
command line parsed; ``setup`` (data and model ready); the sanity check's start and end; the
training loop's start; the first batch), seconds spent in
validation (sanity check excluded), training images seen and the seconds they took (the fit's
training wall time minus validation), peak reserved CUDA memory of the process, and the last
validation metrics the module logged. ``memory_marks`` says where that peak was set: the
allocator's running peak and current reservation at the sanity check's end, after the first and
the second training batch (the recordings), when the first validation starts and ends, and at
the fit's end (host-side counters; no synchronisation). With ``LUCID_BENCH_MEMORY_HISTORY``
set to a number of entries, the probe also records the allocator's history from its
construction (before the model reaches the device) and reports, as ``memory_peaks``, the blocks
alive at the fit's peaks of allocated and of reserved bytes by owner and allocation site
(:func:`memory_trace.attribute`); the recording slows the fit, so its times are then void.
``outside_split`` says where each validated epoch spends its time outside the training steps,
one entry per validation pass after the sanity check, in host seconds between hooks as the
probe sees them (callbacks that run after the probe's hook, Lightning's checkpoints among them,
fall in the next span): ``before_validation_s`` from the epoch's last training batch's end to
the validation's start, ``first_batch_wait_s`` from there to its first batch,
``batches_s`` over its batches, ``epoch_end_s`` from its last batch's end to its end (the
metric's compute and logging), and ``after_validation_s`` from its end to the next epoch's
first training batch (checkpoints, the epoch's end and turnover, the first batch's wait;
absent after the fit's last validation).
Under DDP every rank runs the probe and rank 0 writes (its own images, and the world size, so a
reader can count the global images).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

PROBE_ENV = "LUCID_BENCH_PROBE"
"""Environment variable naming the JSON file the probe writes."""
SPAWN_ENV = "LUCID_BENCH_SPAWN"
"""Environment variable holding the parent's ``time.time()`` when it started this process."""
HISTORY_ENV = "LUCID_BENCH_MEMORY_HISTORY"
"""Environment variable: the allocator history's entries to keep (unset: no history)."""


class FitProbe(pl.Callback):
    """Times start-up, training and validation of one fit and writes them as JSON at its end."""

    def __init__(self) -> None:
        self.spawned = float(os.environ.get(SPAWN_ENV, time.time()))
        self.startup_marks: dict[str, float] = {"probe_built": time.time() - self.spawned}
        self.first_batch = 0.0
        self.val_started = 0.0
        self.val_seconds = 0.0
        self.val_runs = 0
        self.images = 0
        self.steps = 0
        self.epoch_marks: list[float] = []
        self.epoch_steps: list[int] = []
        self.phases: list[dict[str, float]] = []
        self.memory_marks: dict[str, dict[str, float]] = {}
        self.outside_split: list[dict[str, float]] = []
        self._last_step_end = 0.0
        self._pass: dict[str, float] = {}
        self.history_entries = int(os.environ.get(HISTORY_ENV) or 0)
        if self.history_entries and torch.cuda.is_available():
            torch.cuda.memory._record_memory_history(
                max_entries=self.history_entries, stacks="python"
            )

    def on_train_epoch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        self.epoch_marks.append(time.time())
        self.epoch_steps.append(self.steps)

    def on_train_epoch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        self.phases.append(
            {
                key.removeprefix("time/"): float(value)
                for key, value in trainer.callback_metrics.items()
                if key.startswith("time/")
            }
        )

    def _mark(self, name: str) -> None:
        self.startup_marks.setdefault(name, time.time() - self.spawned)

    def _memory_mark(self, name: str) -> None:
        """The first reading under ``name`` of the allocator's running peak and reservation."""
        if torch.cuda.is_available() and name not in self.memory_marks:
            self.memory_marks[name] = {
                "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
                "reserved_gib": torch.cuda.memory_reserved() / 2**30,
            }

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._mark("setup")

    def on_sanity_check_start(self, trainer: pl.Trainer, *_: Any) -> None:
        self._mark("sanity_check_start")

    def on_sanity_check_end(self, trainer: pl.Trainer, *_: Any) -> None:
        self._mark("sanity_check_end")
        self._memory_mark("sanity_check_end")

    def on_train_start(self, trainer: pl.Trainer, *_: Any) -> None:
        self._mark("train_start")

    def on_train_batch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        if not self.first_batch:
            self.first_batch = time.time()
            self._mark("first_batch")
        if "end" in self._pass:
            self._close_pass(time.time())

    def on_train_batch_end(
        self, trainer: pl.Trainer, _module: Any, _out: Any, batch: Any, *_: Any
    ) -> None:
        self._last_step_end = time.time()
        self.images += int(batch["images"].shape[0])
        self.steps += 1
        if self.steps <= 2:
            self._memory_mark(f"step_{self.steps}")

    def on_validation_start(self, trainer: pl.Trainer, *_: Any) -> None:
        self.val_started = time.time()
        if not trainer.sanity_checking:
            self._memory_mark("validation_1_start")
            self._pass = {"start": self.val_started}

    def on_validation_batch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        if not trainer.sanity_checking:
            self._pass.setdefault("first_batch", time.time())

    def on_validation_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        if not trainer.sanity_checking:
            self._pass["last_batch_end"] = time.time()

    def on_validation_end(self, trainer: pl.Trainer, *_: Any) -> None:
        if trainer.sanity_checking:
            return
        self._memory_mark("validation_1_end")
        end = time.time()
        self.val_seconds += end - self.val_started
        self.val_runs += 1
        self._pass["end"] = end

    def _close_pass(self, next_batch: float | None) -> None:
        """One ``outside_split`` entry from the pass's marks (``next_batch``: the next epoch's
        first training batch, ``None`` after the fit's last validation)."""
        marks = self._pass
        first = marks.get("first_batch", marks["end"])
        split = {
            "before_validation_s": marks["start"] - (self._last_step_end or marks["start"]),
            "first_batch_wait_s": first - marks["start"],
            "batches_s": marks.get("last_batch_end", first) - first,
            "epoch_end_s": marks["end"] - marks.get("last_batch_end", first),
        }
        if next_batch is not None:
            split["after_validation_s"] = next_batch - marks["end"]
        self.outside_split.append(split)
        self._pass = {}

    def _memory_peaks(self) -> dict[str, Any]:
        """The recorded history attributed at the fit's peaks (no step markers: whole fit).

        A full history has lost its oldest events, and the attribution's running sums start
        from zero, so it would name wrong peaks: then only ``truncated`` is reported, and a
        larger ``LUCID_BENCH_MEMORY_HISTORY`` is the remedy. ``reserved_by_owner`` matches
        segments by address, which the allocator's expandable segments (the CLI's default) do
        not keep: read the sites, not that split.
        """
        from memory_trace import attribute, pool_ranges

        snapshot = torch.cuda.memory._snapshot()
        trace = snapshot["device_traces"][torch.cuda.current_device()]
        if len(trace) >= self.history_entries:
            return {"truncated": True, "events": len(trace)}
        report = attribute(trace, pool_ranges(snapshot["segments"]), lambda _: False)
        report["truncated"] = False
        return report

    def on_fit_end(self, trainer: pl.Trainer, *_: Any) -> None:
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.synchronize()
        end = time.time()
        self._memory_mark("fit_end")
        if "end" in self._pass:
            self._close_pass(None)
        train_seconds = end - (self.first_batch or end) - self.val_seconds
        metrics = {
            key: float(value)
            for key, value in trainer.callback_metrics.items()
            if key.startswith("val/") and "mAP" in key
        }
        self.epoch_marks.append(end)
        self.epoch_steps.append(self.steps)
        epochs = [
            {"wall_s": b - a, "steps": m - n}
            for a, b, n, m in zip(
                self.epoch_marks,
                self.epoch_marks[1:],
                self.epoch_steps,
                self.epoch_steps[1:],
                strict=False,
            )
        ]
        record = {
            "startup_s": (self.first_batch or end) - self.spawned,
            "startup_marks": self.startup_marks,
            "train_s": train_seconds,
            "val_s": self.val_seconds,
            "val_runs": self.val_runs,
            "train_images": self.images,
            "train_steps": self.steps,
            "train_img_per_s": self.images / train_seconds if train_seconds > 0 else 0.0,
            "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else 0.0,
            "memory_marks": self.memory_marks,
            "metrics": metrics,
            "epochs": epochs,
            "phases_ms": self.phases,
            "outside_split": self.outside_split,
        }
        record["world_size"] = trainer.world_size
        path = os.environ.get(PROBE_ENV)
        if self.history_entries and cuda and trainer.is_global_zero:
            record["memory_peaks"] = self._memory_peaks()
        if path and trainer.is_global_zero:
            Path(path).write_text(json.dumps(record, indent=2))
