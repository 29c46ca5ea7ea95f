"""The Lightning trainer of a step benchmark: training steps only, one GPU, nothing else run.

No validation, logger, checkpoint, progress bar or summary, so that what a benchmark's callback
times or measures is the training steps alone.
"""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback


def step_trainer(
    steps: int,
    probe: Callback,
    accelerator: str = "gpu",
    precision: str = "bf16-mixed",
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
