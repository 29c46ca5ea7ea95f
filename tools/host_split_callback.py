"""A Lightning callback that splits a real fit's training steps by the host's wall clock.

Why (issue 11, docs/engineering/whole-fit-speed.md, session 29): a replayed detect step took
about 26-27 ms at batch 4 and at batch 16 alike in sessions 20-28's fits, while its GPU work is
about 14 ms at batch 4 and 22 ms at batch 16 (``tools/profile_step.py``), so at batch 4 the
step waits for the host. cProfile ranks the host's work but inflates small calls and, on
CPython 3.12, mixes the loader's pin-memory thread into the training thread's stack; the
bare-step tools leave out the CLI's callbacks. This callback wraps chosen functions of
Lightning's loop, the trainer's callbacks and lucid-yolo's replay with ``time.perf_counter``
(``host_split.HostSplit``: inclusive seconds of the calling thread, about a microsecond a
call) inside a real ``lucid-yolo fit``, from the second training epoch on (the first records
the graphs), and writes milliseconds a training step per function.

Validation's rows (``_EvaluationLoop.run`` and what it calls) are counted a training step as
well, so that they add up with the rest to the wall clock; ``val_batches`` and ``val_passes``
turn them back into milliseconds a validation batch or pass. ``replay`` holds the module's replay
counters over the whole fit, the evaluator's scoring and matching apart (:func:`replay_counters`).

The epoch's end after its validation (session 45) has rows of its own: the fit loop's
``on_advance_end`` (the callbacks' ``on_train_epoch_end``, where the checkpoints are saved, and
the logger's epoch metrics), the checkpoint's dump and IO, the next epoch's loader set-up, and
the callbacks' ``on_validation_end`` and ``on_train_epoch_start``.

``_TrainingEpochLoop.advance`` is one whole training batch as the host runs it (fetching the
batch, moving it, the hooks, the step, the logging); the other rows are parts of it, nested rows
counted inside their callers as well. A host-bound step has ``advance`` near the step's
period; where it is not, the host waits in a call that synchronises.

Usage (``tools/`` on ``PYTHONPATH``; the file named by ``LUCID_HOST_SPLIT`` receives the
table)::

    LUCID_HOST_SPLIT=$OUT/host_split.json python3 tools/bench_side_by_side.py --tasks detect \\
        --batch 4 --epochs 3 --tools replay \\
        --lucid-args=--trainer.callbacks+=host_split_callback.HostSplitCallback

``LUCID_HOST_SPLIT_FROM=20`` with ``--epochs 30`` times epochs 20-29 only (the steady state).
"""

from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from host_split import HostSplit, label_of

RESULT_ENV = "LUCID_HOST_SPLIT"
"""Environment variable naming the JSON file the callback writes."""

FIRST_EPOCH_ENV = "LUCID_HOST_SPLIT_FROM"
"""Environment variable giving the first timed epoch where the callback is added by name on the
CLI's command line (default 1): a late epoch of a long fit splits its steady state, after the
validation's matching has recorded its shapes."""

TARGETS = (
    ("lightning.pytorch.loops.training_epoch_loop", "_TrainingEpochLoop", "advance"),
    ("lightning.pytorch.loops.training_epoch_loop", "_TrainingEpochLoop", "on_advance_end"),
    ("lightning.pytorch.loops.training_epoch_loop", "_TrainingEpochLoop", "update_lr_schedulers"),
    ("lightning.pytorch.loops.fetchers", "_PrefetchDataFetcher", "__next__"),
    ("torch.utils.data.dataloader", "_MultiProcessingDataLoaderIter", "_next_data"),
    ("lightning.pytorch.core.module", "LightningModule", "_apply_batch_transfer_handler"),
    ("lightning.pytorch.loops.evaluation_loop", "_EvaluationLoop", "run"),
    ("lightning.pytorch.loops.evaluation_loop", "_EvaluationLoop", "_evaluation_step"),
    ("lightning.pytorch.loops.evaluation_loop", "_EvaluationLoop", "on_run_start"),
    ("lightning.pytorch.loops.evaluation_loop", "_EvaluationLoop", "on_run_end"),
    ("lightning.pytorch.loops.optimization.automatic", "_AutomaticOptimization", "run"),
    ("lightning.pytorch.loops.optimization.automatic", "Closure", "closure"),
    (
        "lightning.pytorch.trainer.connectors.logger_connector.logger_connector",
        "_LoggerConnector",
        "update_train_step_metrics",
    ),
    (
        "lightning.pytorch.trainer.connectors.logger_connector.logger_connector",
        "_LoggerConnector",
        "on_batch_end",
    ),
    (
        "lightning.pytorch.trainer.connectors.logger_connector.logger_connector",
        "_LoggerConnector",
        "on_batch_start",
    ),
    ("lightning.pytorch.core.module", "LightningModule", "log"),
    ("lightning.pytorch.core.module", "LightningModule", "log_dict"),
    ("lucid_yolo.train.module", "YoloModule", "training_step"),
    ("lucid_yolo.train.module", "YoloModule", "on_train_batch_start"),
    ("lucid_yolo.train.module", "YoloModule", "optimizer_step"),
    ("lucid_yolo.train.module", "YoloModule", "_loss"),
    ("lucid_yolo.train.module", "YoloModule", "_evaluate"),
    ("lucid_yolo.train.module", "YoloModule", "settle_update"),
    ("lucid_yolo.train.data.datamodule", "YoloDataModule", "transfer_batch_to_device"),
    ("lucid_yolo.train.data.datamodule", "YoloDataModule", "on_after_batch_transfer"),
    ("lucid_yolo.train.data.packed_batch", "PackedBatch", "to"),
    ("lucid_yolo.train.data.packed_batch", "PackedBatch", "unpack"),
    ("lucid_yolo.train.data.augment.device_pixels", "DevicePixels", "__call__"),
    ("lucid_yolo.train.data.augment.device_pixels", "DevicePixels", "_finish_images"),
    ("lucid_yolo.train.data.augment.device_pixels", None, "jitter_tables"),
    ("lucid_yolo.train.data.augment.device_pixels", None, "hsv_lookup"),
    ("lucid_yolo.train.evaluation", "Evaluator", "_top_k"),
    ("lucid_yolo.train.evaluation", "Evaluator", "_source_predictions"),
    ("lucid_yolo.train.evaluation", "Evaluator", "_source_targets"),
    ("lucid_yolo.train.scoring_replay", "ScoringReplay", "__call__"),
    ("lucid_yolo.train.metrics.mean_average_precision", "MeanAveragePrecision", "score_batch"),
    ("lucid_yolo.train.metrics.mean_average_precision", "MeanAveragePrecision", "add_scored"),
    ("lucid_yolo.train.metrics.mean_average_precision", "MeanAveragePrecision", "_settle"),
    (
        "lucid_yolo.train.metrics.mean_average_precision",
        "MeanAveragePrecision",
        "_batch_overlaps",
    ),
    ("lucid_yolo.train.metrics.matched_records", "PendingBatch", "start"),
    ("lucid_yolo.train.metrics.matched_records", "PendingBatch", "finish"),
    ("lucid_yolo.train.metrics.match_replay", "MatchReplay", "__call__"),
    ("lucid_yolo.train.evaluation", "Evaluator", "update"),
    ("lucid_yolo.train.evaluation", "Evaluator", "compute"),
    ("lucid_yolo.train.metrics.mean_average_precision", "MeanAveragePrecision", "update_batch"),
    ("lucid_yolo.train.replay.binding", "NetworkReplay", "evaluate"),
    ("lucid_yolo.train.replay.binding", "NetworkReplay", "start_evaluation"),
    ("lucid_yolo.train.replay.binding", "NetworkReplay", "end_evaluation"),
    ("lucid_yolo.replay.forward", "ForwardRecorder", "__call__"),
    ("lucid_yolo.train.replay.binding", "NetworkReplay", "images"),
    ("lucid_yolo.train.replay.binding", "NetworkReplay", "__call__"),
    ("lucid_yolo.train.replay.binding", "NetworkReplay", "loss"),
    ("lucid_yolo.train.replay.binding", "NetworkReplay", "network_and_loss"),
    ("lucid_yolo.replay.recorder", "RegionRecorder", "__call__"),
    ("lucid_yolo.replay.recorder", "RegionRecorder", "_launch_forward"),
    ("lucid_yolo.replay.recorder", "RegionRecorder", "_launch_backward"),
    ("lucid_yolo.replay.recorder", "RegionRecorder", "_write_gradients"),
    ("lucid_yolo.replay.recorder", None, "route"),
    ("lucid_yolo.replay._autograd", None, "copy_grouped"),
    ("lucid_yolo.replay._sharing", "SharingProbe", "arm"),
    ("lucid_yolo.replay._recycling", "GradientRecycler", "take"),
    ("lucid_yolo.replay._recycling", "GradientRecycler", "keep_after_backward"),
    ("lucid_yolo.replay._recycling", "GradientRecycler", "keep_now"),
    ("lucid_yolo.replay._sharing", "OutsideUseWatch", "_check"),
    ("lucid_yolo.replay._graphs", "RegionGraphs", "launch_forward"),
    ("lucid_yolo.replay._graphs", "RegionGraphs", "launch_backward"),
    ("lucid_yolo.replay.signature", "Binding", "check"),
    ("lucid_yolo.replay.signature", "Binding", "signature"),
    ("lucid_yolo.replay.update", "UpdateRecorder", "__call__"),
    ("lucid_yolo.replay.update", "GraphedOptimizer", "step"),
    ("lucid_yolo.replay.update", "GraphedOptimizer", "zero_grad"),
    ("lucid_yolo.replay.update", None, "copy_grouped"),
    ("torch.optim.optimizer", "Optimizer", "zero_grad"),
    ("lucid_yolo.train.optim.musgd", "MuSGD", "step"),
    ("torch.cuda", "CUDAGraph", "replay"),
    ("torch", "autograd", "backward"),
    ("lightning.pytorch.loops.fit_loop", "_FitLoop", "on_advance_start"),
    ("lightning.pytorch.loops.fit_loop", "_FitLoop", "on_advance_end"),
    ("lightning.pytorch.loops.fit_loop", "_FitLoop", "setup_data"),
    ("lightning.pytorch.loops.training_epoch_loop", "_TrainingEpochLoop", "reset"),
    ("lightning.pytorch.loops.training_epoch_loop", "_TrainingEpochLoop", "on_run_start"),
    ("lightning.pytorch.loops.fetchers", "_DataFetcher", "reset"),
    ("lightning.pytorch.loops.fetchers", "_DataFetcher", "setup"),
    ("lightning.pytorch.loops.fetchers", "_DataFetcher", "__iter__"),
    ("lucid_yolo.train.data.resumable_loader", "ResumableLoader", "__iter__"),
    ("lightning.pytorch.callbacks.model_checkpoint", "ModelCheckpoint", "_save_checkpoint"),
    ("lucid_yolo.train.trainer", "YoloTrainer", "save_checkpoint"),
    (
        "lightning.pytorch.trainer.connectors.checkpoint_connector",
        "_CheckpointConnector",
        "dump_checkpoint",
    ),
    ("lucid_yolo.train.callbacks.atomic_checkpoint_io", "AtomicCheckpointIO", "save_checkpoint"),
    (
        "lightning.pytorch.trainer.connectors.logger_connector.logger_connector",
        "_LoggerConnector",
        "update_train_epoch_metrics",
    ),
    (
        "lightning.pytorch.trainer.connectors.logger_connector.logger_connector",
        "_LoggerConnector",
        "update_eval_epoch_metrics",
    ),
    ("lightning.pytorch.loggers.csv_logs", "CSVLogger", "log_metrics"),
    ("lightning.pytorch.loggers.csv_logs", "CSVLogger", "save"),
)
"""``(module, class or None for a module function, name)`` of each function timed, where it
exists (a missing one is listed under ``missing``, not an error: the loop's internals move
between Lightning releases)."""

HOOKS = (
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_backward",
    "on_after_backward",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_validation_epoch_end",
    "on_validation_end",
    "on_train_epoch_start",
    "on_train_epoch_end",
)
"""Hooks timed on each of the trainer's callbacks' classes."""


def replay_counters(pl_module: pl.LightningModule) -> dict[str, dict[str, int]]:
    """The fit's replay counters, whole fit (not only the timed epochs): every recorder's sum
    (``all``) and the evaluator's scoring and matching apart, whose recordings and eager calls
    tell whether a validation pass replays or records; empty for a module without them."""
    counters = {}
    total = getattr(pl_module, "replay_telemetry", None)
    if total is not None:
        counters["all"] = total.as_dict()
    evaluator = getattr(pl_module, "evaluator", None)
    scoring = getattr(evaluator, "scoring_telemetry", None)
    if scoring is not None:
        counters["scoring"] = scoring.as_dict()
    matching = getattr(getattr(evaluator, "metric", None), "matching_telemetry", None)
    if matching is not None:
        counters["matching"] = matching.as_dict()
    return counters


def resolve(module_name: str, owner_name: str | None, name: str) -> Any | None:
    """The class or module that holds ``name``, or ``None`` where it does not exist."""
    try:
        owner: Any = importlib.import_module(module_name)
    except ImportError:
        return None
    if owner_name is not None:
        owner = getattr(owner, owner_name, None)
    return owner if owner is not None and hasattr(owner, name) else None


class HostSplitCallback(pl.Callback):
    """Wraps :data:`TARGETS` and the callbacks' :data:`HOOKS` from ``first_epoch`` on and puts
    them back when training ends or fails; writes milliseconds a step to the file
    ``$LUCID_HOST_SPLIT`` names.

    ``steps`` counts training batches (micro-batches under accumulation); ``wall_ms_per_step``
    is the wall time from the first timed epoch's start to training's end over those batches,
    validation, checkpoints and epoch turnover included.
    """

    def __init__(self, first_epoch: int | None = None) -> None:
        if first_epoch is None:
            first_epoch = int(os.environ.get(FIRST_EPOCH_ENV, "1"))
        self.first_epoch = first_epoch
        self.split: HostSplit | None = None
        self.missing: list[str] = []
        self.steps = 0
        self.val_batches = 0
        self.val_passes = 0
        self.began = 0.0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch < self.first_epoch or self.split is not None:
            return
        self.split = HostSplit()
        for module_name, owner_name, name in TARGETS:
            owner = resolve(module_name, owner_name, name)
            if owner is None:
                self.missing.append(label_of(owner_name or module_name, name))
            else:
                self.split.wrap(owner, name)
        callbacks: list[pl.Callback] = trainer.callbacks  # type: ignore[attr-defined]
        classes = {type(c) for c in callbacks if c is not self}
        # a subclass before its bases: wrapped after a base, it would inherit the base's wrapper
        # and count each call under both names
        for kind in sorted(classes, key=lambda k: (-len(k.__mro__), k.__name__)):
            for hook in HOOKS:
                self.split.wrap(kind, hook)
        self.began = time.perf_counter()

    def on_train_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        if self.split is not None:
            self.steps += 1

    def on_validation_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        if self.split is not None:
            self.val_batches += 1

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.split is not None:
            self.val_passes += 1

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.split is None:
            return
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        seconds = time.perf_counter() - self.began
        self.write({**self.report(seconds), "replay": replay_counters(pl_module)})
        self._restore()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._restore()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._restore()

    def _restore(self) -> None:
        """Put every wrapped function back (the wrappers are process-wide)."""
        if self.split is not None:
            self.split.restore()
            self.split = None

    def report(self, seconds: float) -> dict[str, Any]:
        """Milliseconds and calls a step per function (inclusive), the costliest first; no rows
        when no step ended in the timed epochs."""
        assert self.split is not None
        rows = self.split.table(self.steps, "step", milliseconds=True) if self.steps else []
        return {
            "steps": self.steps,
            "val_batches": self.val_batches,
            "val_passes": self.val_passes,
            "from_epoch": self.first_epoch,
            "wall_ms_per_step": round(seconds * 1000.0 / self.steps, 3) if self.steps else None,
            "rows": rows,
            "missing": self.missing,
        }

    @staticmethod
    def write(report: dict[str, Any]) -> None:
        target = os.environ.get(RESULT_ENV)
        if target:
            Path(target).write_text(json.dumps(report, indent=1) + "\n")


__all__ = [
    "FIRST_EPOCH_ENV",
    "HOOKS",
    "RESULT_ENV",
    "TARGETS",
    "HostSplitCallback",
    "replay_counters",
    "resolve",
]
