"""The Lightning trainer of a step benchmark: training steps on one GPU, little else run.

No logger, checkpoint, progress bar or summary, and no validation unless asked for
(``val_batches``), so that what a benchmark's callback times or measures is the training steps
alone, or the steps and the validation the caller chose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

if TYPE_CHECKING:
    from lightning.fabric.plugins.precision.precision import _PRECISION_INPUT


def step_trainer(
    steps: int,
    probe: Callback,
    accelerator: str = "gpu",
    precision: _PRECISION_INPUT = "bf16-mixed",
    val_batches: int = 0,
) -> pl.Trainer:
    """A trainer that runs ``steps`` optimizer steps on one device with ``probe`` attached,
    validating ``val_batches`` batches at each epoch's end (none by default)."""
    return pl.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=precision,
        max_steps=steps,
        limit_val_batches=val_batches,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[probe],
    )
