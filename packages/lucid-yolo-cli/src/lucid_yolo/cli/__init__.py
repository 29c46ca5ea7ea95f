"""lucid_yolo.cli: the ``lucid-yolo`` command (fit, validate, test, predict, info, data, export).

The checkpoint loader and the prediction writer need torch and Lightning; they are imported on
first use (PEP 562), so that ``lucid-yolo --help`` does not load them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lucid_yolo.cli.configs import packaged_configs, resolve_config
from lucid_yolo.cli.errors import CliError
from lucid_yolo.cli.main import main

if TYPE_CHECKING:
    from lucid_yolo.cli.checkpoint import Deployed, load_checkpoint
    from lucid_yolo.cli.prediction_writer import PredictionWriter

_LAZY = {
    "Deployed": "lucid_yolo.cli.checkpoint",
    "load_checkpoint": "lucid_yolo.cli.checkpoint",
    "PredictionWriter": "lucid_yolo.cli.prediction_writer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lucid_yolo.cli' has no attribute {name!r}")


__all__ = [
    # entry point
    "main",
    # configs
    "packaged_configs",
    "resolve_config",
    # predict (LightningCLI callback, --output.*)
    "PredictionWriter",
    # checkpoints (export)
    "Deployed",
    "load_checkpoint",
    # errors
    "CliError",
]
