"""The CLI's progress bar leaves out Lightning's logger version (``v_num``) and reads the
metrics at most once per interval while training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.loggers import CSVLogger

from lucid_yolo.cli.errors import CliError
from lucid_yolo.cli.progress_bar import RunProgressBar


def _trainer(tmp_path: Path) -> pl.Trainer:
    logger = CSVLogger(tmp_path, name="", version="fit1")
    return pl.Trainer(logger=logger, enable_checkpointing=False, enable_progress_bar=False)


def test_run_progress_bar_drops_the_logger_version(tmp_path: Path) -> None:
    trainer, module = _trainer(tmp_path), pl.LightningModule()
    assert RichProgressBar().get_metrics(trainer, module)["v_num"] == "fit1"
    assert "v_num" not in RunProgressBar().get_metrics(trainer, module)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each read of Lightning's metrics returns ``{"read": n}``, n counting from 1."""
    reads: list[int] = []

    def read(self: RichProgressBar, *_: Any) -> dict[str, Any]:
        reads.append(len(reads) + 1)
        return {"read": reads[-1], "v_num": "fit1"}

    monkeypatch.setattr(RichProgressBar, "get_metrics", read)
    return reads


def test_run_progress_bar_reads_metrics_at_most_once_per_interval(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    reads = _counting_reads(monkeypatch)
    clock = _Clock()
    bar = RunProgressBar(metrics_every_s=1.0, clock=clock)
    trainer, module = _trainer(tmp_path), pl.LightningModule()
    shown = [bar.get_metrics(trainer, module)["read"] for _ in range(3)]
    clock.now += 0.99
    shown.append(bar.get_metrics(trainer, module)["read"])
    clock.now += 0.01
    shown.append(bar.get_metrics(trainer, module)["read"])
    assert shown == [1, 1, 1, 1, 2]
    assert reads == [1, 2]
    assert "v_num" not in bar.get_metrics(trainer, module)


def test_run_progress_bar_reads_fresh_metrics_at_epoch_end_and_after_validation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    reads = _counting_reads(monkeypatch)
    bar = RunProgressBar(metrics_every_s=60.0, clock=_Clock())
    trainer, module = _trainer(tmp_path), pl.LightningModule()
    assert bar.get_metrics(trainer, module)["read"] == 1
    monkeypatch.setattr(RichProgressBar, "on_train_epoch_end", lambda *_: None)
    monkeypatch.setattr(RichProgressBar, "on_validation_end", lambda *_: None)
    bar.on_train_epoch_end(trainer, module)
    assert bar.get_metrics(trainer, module)["read"] == 2
    bar.on_validation_end(trainer, module)
    assert bar.get_metrics(trainer, module)["read"] == 3
    assert len(reads) == 3


def test_run_progress_bar_refuses_a_negative_interval() -> None:
    with pytest.raises(CliError, match=r"metrics_every_s must be >= 0 seconds, got -1\.0"):
        RunProgressBar(metrics_every_s=-1.0)


def test_run_progress_bar_shows_the_last_logged_training_loss(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _counting_reads(monkeypatch)
    trainer, module = _trainer(tmp_path), pl.LightningModule()
    assert "loss" not in RunProgressBar().get_metrics(trainer, module)
    trainer.callback_metrics["train/loss"] = torch.tensor(2.5)
    assert RunProgressBar().get_metrics(trainer, module)["loss"] == 2.5
