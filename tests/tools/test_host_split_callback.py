"""The host-split callback times a real Lightning fit's steps from its chosen epoch on."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from tool_modules import load_tool
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from lucid_yolo.train import ReplayConfig, YoloModule


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    loaded = load_tool("host_split_callback", monkeypatch)
    monkeypatch.delenv(loaded.FIRST_EPOCH_ENV, raising=False)  # the tests choose the epoch
    return loaded


class _Tiny(pl.LightningModule):
    def __init__(self, fail_in_epoch: int | None = None) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.fail_in_epoch = fail_in_epoch

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        if self.current_epoch == self.fail_in_epoch:
            raise RuntimeError("a step that fails")
        return self.layer(batch[0]).square().mean()

    def validation_step(self, batch: list[Tensor], batch_idx: int) -> None:
        self.layer(batch[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _Counting(pl.Callback):
    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, *_: object) -> None:
        self.batches += 1


class _CountingToo(_Counting):
    """Inherits its hook: wrapped after its base, it would count each call under both names."""


def _fit(
    tool: ModuleType,
    tmp_path: Path,
    epochs: int,
    module: _Tiny | None = None,
    checkpoints: bool = False,
) -> _Counting:
    counting = _Counting()
    data = DataLoader(TensorDataset(torch.ones(12, 4)), batch_size=4)
    trainer = pl.Trainer(
        max_epochs=epochs,
        callbacks=[tool.HostSplitCallback(), counting, _CountingToo()],
        accelerator="cpu",
        logger=False,
        enable_checkpointing=checkpoints,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    val = DataLoader(TensorDataset(torch.ones(8, 4)), batch_size=4)
    trainer.fit(module or _Tiny(), data, val)
    return counting


def _wrappable(tool: ModuleType) -> dict[tuple[Any, str], tuple[Any, bool]]:
    """Each target's (owner, name): what the owner holds under the name, and whether as its own."""
    found = {}
    for module_name, owner_name, name in tool.TARGETS:
        owner = tool.resolve(module_name, owner_name, name)
        if owner is not None:
            found[owner, name] = (inspect.getattr_static(owner, name), name in vars(owner))
    for kind in (_Counting, _CountingToo):
        for hook in tool.HOOKS:
            found[kind, hook] = (inspect.getattr_static(kind, hook), hook in vars(kind))
    return found


@pytest.fixture
def report_file(tool: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the callback writes its report in this test."""
    out = tmp_path / "split.json"
    monkeypatch.setenv(tool.RESULT_ENV, str(out))
    return out


def test_steps_after_the_first_epoch_are_split_and_everything_is_put_back(
    tool: ModuleType, tmp_path: Path, report_file: Path
) -> None:
    before = _wrappable(tool)
    counting = _fit(tool, tmp_path, epochs=3, checkpoints=True)
    report = json.loads(report_file.read_text())
    assert report["steps"] == 6  # epochs 1 and 2, three batches each
    rows = {row["function"]: row for row in report["rows"]}
    assert rows["_TrainingEpochLoop.advance"]["calls_per_step"] == 1.0
    assert rows["_TrainingEpochLoop.advance"]["ms_per_step"] > 0.0
    assert rows["_Counting.on_train_batch_end"]["calls_per_step"] == 1.0
    assert rows["_CountingToo.on_train_batch_end"]["calls_per_step"] == 1.0
    assert "HostSplitCallback.on_train_batch_end" not in rows
    # validation after epochs 1 and 2, two batches each, counted a training step as well
    assert (report["val_passes"], report["val_batches"]) == (2, 4)
    calls = {name: rows[name]["calls_per_step"] for name in rows}
    assert calls["_EvaluationLoop.run"] == pytest.approx(2 / 6, abs=1e-3)
    assert calls["_EvaluationLoop._evaluation_step"] == pytest.approx(4 / 6, abs=1e-3)
    # the epoch's end after its validation: the fit loop's turnover, the checkpoint's save and
    # the callbacks' hooks, once an epoch
    for name in (
        "_FitLoop.on_advance_end",
        "ModelCheckpoint._save_checkpoint",
        "_CheckpointConnector.dump_checkpoint",
        "_Counting.on_validation_end",
        "_Counting.on_train_epoch_start",
    ):
        assert calls[name] == pytest.approx(2 / 6, abs=1e-3), name
    assert report["missing"] == []  # every target exists in this Lightning and lucid-yolo
    assert _wrappable(tool) == before
    assert counting.batches == 9


def test_the_report_holds_the_module_replay_counters(
    tool: ModuleType, tmp_path: Path, report_file: Path
) -> None:
    _fit(tool, tmp_path, epochs=2)
    assert json.loads(report_file.read_text())["replay"] == {}  # a module without counters
    module = YoloModule("yolo26n", num_classes=2, replay=ReplayConfig(evaluation=True))
    counters = tool.replay_counters(module)
    assert set(counters) == {"all", "scoring", "matching"}
    assert counters["scoring"]["recordings"] == 0
    assert counters["matching"]["recordings"] == 0
    assert counters["all"] == module.replay_telemetry.as_dict()


def test_the_first_timed_epoch_may_come_from_the_environment(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert tool.HostSplitCallback().first_epoch == 1
    monkeypatch.setenv(tool.FIRST_EPOCH_ENV, "20")
    assert tool.HostSplitCallback().first_epoch == 20
    assert tool.HostSplitCallback(first_epoch=3).first_epoch == 3


def test_a_failing_fit_puts_everything_back(tool: ModuleType, tmp_path: Path) -> None:
    before = _wrappable(tool)
    with pytest.raises(RuntimeError, match="a step that fails"):
        _fit(tool, tmp_path, epochs=3, module=_Tiny(fail_in_epoch=2))
    assert _wrappable(tool) == before


def test_a_fit_shorter_than_the_first_timed_epoch_writes_nothing(
    tool: ModuleType, tmp_path: Path, report_file: Path
) -> None:
    _fit(tool, tmp_path, epochs=1)
    assert not report_file.exists()


def test_without_a_step_the_report_has_no_rows(tool: ModuleType) -> None:
    callback = tool.HostSplitCallback()
    callback.split = tool.HostSplit()
    report = callback.report(1.0)
    assert (report["steps"], report["rows"], report["wall_ms_per_step"]) == (0, [], None)


def test_a_missing_function_is_named_not_raised(tool: ModuleType) -> None:
    assert tool.resolve("lightning.pytorch.loops.fetchers", "_PrefetchDataFetcher", "__next__")
    assert tool.resolve("lightning.pytorch.loops.fetchers", "_NoSuchFetcher", "__next__") is None
    assert tool.resolve("no_such_module_here", None, "route") is None
