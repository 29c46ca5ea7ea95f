"""A CPU Trainer that writes nothing and prints nothing of its own: the tests' fit harness.

Tests that need a real Lightning loop (callbacks, loaders, epochs) but no logger, checkpoint,
progress bar or model summary build it here, so each test names only what it varies.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl


def quiet_cpu_trainer(**options: Any) -> pl.Trainer:
    """``pl.Trainer`` on the CPU without logger, checkpoints, progress bar or model summary;
    ``options`` add to or override those."""
    settings: dict[str, Any] = {
        "accelerator": "cpu",
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    return pl.Trainer(**{**settings, **options})
