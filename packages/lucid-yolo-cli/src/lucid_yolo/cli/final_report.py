"""The last line of ``lucid-yolo fit``: the best checkpoint's metrics, its epoch and its path.

The checkpoint monitor keeps the epoch with the best fitness, which is seldom the last one on a
small set, so the line reports the metrics of the epoch that ``best.ckpt`` holds, not the last
validation. :class:`ValidationHistory` keeps every epoch's validation metrics; the epoch is the
first whose fitness equals the monitor's best score, so the choice stays the monitor's own.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import numpy as np
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

FITNESS = "val/fitness"
"""The metric ``best.ckpt`` is chosen by (the task's primary mAP50-95)."""


class ValidationHistory(Callback):
    """Keep the ``val/*`` metrics of every epoch's validation, keyed by epoch (from 0).

    Fires in ``on_validation_end``, after the module logged its epoch metrics; the sanity check
    before training is skipped.
    """

    def __init__(self) -> None:
        self.epochs: dict[int, dict[str, float]] = {}

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        if metrics:
            self.epochs[trainer.current_epoch] = metrics


def metrics_text(metrics: dict[str, float]) -> str:
    """``box mAP50-95 x mAP50 y, mask …`` for every kind in ``metrics``, sorted by kind."""
    parts = []
    for key in sorted(metrics):
        if key.endswith("/mAP50-95"):
            kind = key.split("/")[1]
            map50 = metrics.get(f"val/{kind}/mAP50", 0.0)
            parts.append(f"{kind} mAP50-95 {metrics[key]:.4f} mAP50 {map50:.4f}")
    return ", ".join(parts) if parts else "no validation metrics"


def best_epoch(history: dict[int, dict[str, float]], best_score: float | None) -> int | None:
    """The first epoch whose fitness equals ``best_score`` (``None``: no such epoch).

    Compared in float32, the precision the metrics are logged in.
    """
    if best_score is None:
        return None
    for epoch in sorted(history):
        fitness = history[epoch].get(FITNESS)
        if fitness is not None and np.float32(fitness) == np.float32(best_score):
            return epoch
    return None


def final_line(
    trainer: Any, history: dict[int, dict[str, float]], *, skipped_steps: int = 0
) -> str:
    """``final: best epoch E of 0-L: <metrics> | checkpoint: path``.

    Without a best checkpoint (no validation, or no checkpoint callback) the line reports the
    last validated epoch and the last checkpoint. ``skipped_steps`` (updates left out for a
    non-finite loss) adds ``| non-finite loss: N step(s) skipped`` when not 0.
    """
    tail = f" | non-finite loss: {skipped_steps} step(s) skipped" if skipped_steps else ""
    return _metrics_and_checkpoint(trainer, history) + tail


def _metrics_and_checkpoint(trainer: Any, history: dict[int, dict[str, float]]) -> str:
    callback = trainer.checkpoint_callback
    best_path = getattr(callback, "best_model_path", "") or ""
    score = getattr(callback, "best_model_score", None)
    last_epoch = max(trainer.current_epoch - 1, 0)
    epoch = best_epoch(history, None if score is None else float(score))
    if epoch is not None and best_path:
        head = f"best epoch {epoch} of 0-{last_epoch}: {metrics_text(history[epoch])}"
        return f"final: {head} | checkpoint: {best_path}"
    path = getattr(callback, "last_model_path", "") or "none saved"
    if not history:
        return f"final: no validation metrics | checkpoint: {path}"
    last = max(history)
    return f"final: last epoch {last}: {metrics_text(history[last])} | checkpoint: {path}"


__all__ = ["FITNESS", "ValidationHistory", "best_epoch", "final_line", "metrics_text"]
