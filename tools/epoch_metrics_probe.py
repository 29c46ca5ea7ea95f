"""A Lightning callback that appends every validation's metrics to a JSON-lines file at once.

For runs that a time limit may cut short (the GPU session's commands are killed at their limit):
each validation's ``val/*`` metrics, the epoch, the optimizer steps so far and the learning rate
of the first parameter group are one line of ``$LUCID_EPOCH_METRICS``, written and flushed when
the validation ends, with the seconds since the fit started (``fit_s``: how far a cut run got, and
how fast). Add it to a CLI fit with ``tools/`` on ``PYTHONPATH``::

    LUCID_EPOCH_METRICS=$OUT/seg.jsonl lucid-yolo fit --config segment-n \\
        --trainer.callbacks+=epoch_metrics_probe.EpochMetrics

It measures and changes nothing the fit computes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import lightning.pytorch as pl

PATH_ENV = "LUCID_EPOCH_METRICS"
"""Environment variable naming the JSON-lines file."""


class EpochMetrics(pl.Callback):
    """Appends one JSON line per validation (the sanity check excluded)."""

    def __init__(self) -> None:
        self.path = Path(os.environ.get(PATH_ENV, "epoch_metrics.jsonl"))
        self.fit_started = time.time()

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.fit_started = time.time()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        lr = float(optimizer.param_groups[0]["lr"]) if optimizer is not None else None
        record = {
            "epoch": trainer.current_epoch,
            "step": trainer.global_step,
            "lr": lr,
            "fit_s": time.time() - self.fit_started,
            **metrics,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as file:
            file.write(json.dumps(record) + "\n")
