"""lucid_yolo.cli: the ``lucid-yolo`` command (fit, validate, test, predict, info, data, export)."""

from lucid_yolo.cli.checkpoint import Deployed, load_checkpoint
from lucid_yolo.cli.configs import packaged_configs, resolve_config
from lucid_yolo.cli.errors import CliError
from lucid_yolo.cli.main import main
from lucid_yolo.cli.prediction_writer import PredictionWriter

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
