"""tools/find_host_syncs.py: the watched step loop of a replayed fit with the CLI's defaults."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from tool_modules import load_tool

pytestmark = pytest.mark.filterwarnings(
    "ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"
)


def _batch_starts(recorder: Any, epoch: int, count: int) -> None:
    for _ in range(count):
        recorder.on_train_batch_start(SimpleNamespace(current_epoch=epoch))


def test_find_host_syncs_watches_the_batches_after_the_first_epoch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # the recorder swaps it
    recorder = load_tool("find_host_syncs", monkeypatch).SyncRecorder()
    _batch_starts(recorder, epoch=0, count=3)
    assert recorder.steps == 0
    _batch_starts(recorder, epoch=1, count=3)
    recorder.on_validation_start()
    _batch_starts(recorder, epoch=2, count=2)
    recorder.on_train_epoch_end()
    assert recorder.steps == 5
    # periods between batch starts of one epoch only: turnover and validation are not steps
    assert len(recorder.periods_ms) == 3


def test_find_host_syncs_counts_a_synchronisation_only_while_watching(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # the recorder swaps it
    recorder = load_tool("find_host_syncs", monkeypatch).SyncRecorder()
    shown: list[str] = []
    monkeypatch.setattr(recorder, "_previous", lambda message, *_: shown.append(str(message)))
    message = "called a synchronizing CUDA operation"
    notice = "Synchronization debug mode is a prototype feature and does not yet detect all ..."
    recorder._record(message, UserWarning, "x.py", 1)
    _batch_starts(recorder, epoch=1, count=1)
    recorder._record(notice, UserWarning, "x.py", 1)  # switching the mode on: no sync
    recorder._record(message, UserWarning, "x.py", 1)
    recorder._record("another warning", UserWarning, "x.py", 1)
    recorder.on_validation_start()
    assert sum(recorder.sites.values()) == 1
    assert shown == [message, notice, "another warning"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_replayed_bf16_fit_step_loop_does_not_synchronise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = load_tool("find_host_syncs", monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # counted by the tool's recorder, not raised
        # bare: no progress bar or logger, whose reads are timed or periodic by design
        result = tool.watched_fit(tmp_path, batch=4, imgsz=128, images=16, epochs=3, bare=True)
    assert result["steps"] == 8
    assert result["sites"] == [], result["sites"]
