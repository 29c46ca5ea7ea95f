"""The host-split callback times a real Lightning fit's steps from its chosen epoch on."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import lightning.pytorch as pl
import pytest
import torch
from tool_modules import load_tool
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("host_split_callback", monkeypatch)


class _Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        return self.layer(batch[0]).square().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _Counting(pl.Callback):
    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, *_: object) -> None:
        self.batches += 1


def _fit(tool: ModuleType, tmp_path: Path, epochs: int) -> tuple[object, _Counting]:
    split = tool.HostSplitCallback()
    counting = _Counting()
    data = DataLoader(TensorDataset(torch.ones(12, 4)), batch_size=4)
    trainer = pl.Trainer(
        max_epochs=epochs,
        callbacks=[split, counting],
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(_Tiny(), data)
    return split, counting


def test_steps_after_the_first_epoch_are_split_and_everything_is_put_back(
    tool: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

    advance = _TrainingEpochLoop.advance
    hook = vars(_Counting)["on_train_batch_end"]
    out = tmp_path / "split.json"
    monkeypatch.setenv(tool.RESULT_ENV, str(out))
    _, counting = _fit(tool, tmp_path, epochs=3)
    report = json.loads(out.read_text())
    assert report["steps"] == 6  # epochs 1 and 2, three batches each
    rows = {row["function"]: row for row in report["rows"]}
    assert rows["_TrainingEpochLoop.advance"]["calls_per_step"] == 1.0
    assert rows["_Counting.on_train_batch_end"]["calls_per_step"] == 1.0
    assert rows["_TrainingEpochLoop.advance"]["ms_per_step"] > 0.0
    assert "HostSplitCallback.on_train_batch_end" not in rows
    assert report["missing"] == []  # every target exists in this Lightning and lucid-yolo
    assert _TrainingEpochLoop.advance is advance
    assert vars(_Counting)["on_train_batch_end"] is hook
    assert "on_before_backward" not in vars(_Counting)
    assert counting.batches == 9


def test_a_fit_shorter_than_the_first_timed_epoch_writes_nothing(
    tool: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "split.json"
    monkeypatch.setenv(tool.RESULT_ENV, str(out))
    _fit(tool, tmp_path, epochs=1)
    assert not out.exists()


def test_a_missing_function_is_named_not_raised(tool: ModuleType) -> None:
    assert tool.resolve("lightning.pytorch.loops.fetchers", "_PrefetchDataFetcher", "__next__")
    assert tool.resolve("lightning.pytorch.loops.fetchers", "_NoSuchFetcher", "__next__") is None
    assert tool.resolve("no_such_module_here", None, "route") is None
