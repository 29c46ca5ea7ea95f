"""The CLI's progress bar leaves out Lightning's logger version (``v_num``)."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.loggers import CSVLogger

from lucid_yolo.cli.progress_bar import RunProgressBar


def _trainer(tmp_path: Path) -> pl.Trainer:
    logger = CSVLogger(tmp_path, name="", version="fit1")
    return pl.Trainer(logger=logger, enable_checkpointing=False, enable_progress_bar=False)


def test_run_progress_bar_drops_the_logger_version(tmp_path: Path) -> None:
    trainer, module = _trainer(tmp_path), pl.LightningModule()
    assert RichProgressBar().get_metrics(trainer, module)["v_num"] == "fit1"
    assert "v_num" not in RunProgressBar().get_metrics(trainer, module)
