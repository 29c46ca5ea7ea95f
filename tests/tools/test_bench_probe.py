"""The benchmark's fit probe says where a fit's peak reserved memory was set."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("bench_probe", monkeypatch)


def _writing_probe(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> tuple[Any, SimpleNamespace, Path]:
    """A probe that writes its record to ``tmp_path``, and a trainer in its sanity check."""
    probe_file = tmp_path / "probe.json"
    monkeypatch.setenv(tool.PROBE_ENV, str(probe_file))
    trainer = SimpleNamespace(
        sanity_checking=True, callback_metrics={}, world_size=1, is_global_zero=True
    )
    return tool.FitProbe(), trainer, probe_file


def test_fit_probe_keeps_the_first_reading_of_each_memory_mark(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    allocator = {"peak": 0, "reserved": 0}
    monkeypatch.setattr(tool.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tool.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(tool.torch.cuda, "max_memory_reserved", lambda: allocator["peak"])
    monkeypatch.setattr(tool.torch.cuda, "memory_reserved", lambda: allocator["reserved"])
    probe, trainer, probe_file = _writing_probe(tool, monkeypatch, tmp_path)
    batch = {"images": SimpleNamespace(shape=(2, 3, 8, 8))}

    def at(gib: float, reserved_gib: float) -> None:
        allocator["peak"], allocator["reserved"] = int(gib * 2**30), int(reserved_gib * 2**30)

    at(1.0, 1.0)
    probe.on_validation_start(trainer)
    probe.on_validation_end(trainer)
    probe.on_sanity_check_end(trainer)
    trainer.sanity_checking = False
    for step, (peak, reserved) in enumerate([(3.0, 2.0), (3.0, 2.5), (3.5, 2.5)]):
        at(peak, reserved)
        probe.on_train_batch_end(trainer, None, None, batch, step)
    for peak in (4.0, 5.0):
        at(peak, 4.0)
        probe.on_validation_start(trainer)
        probe.on_validation_end(trainer)
    at(5.0, 1.0)
    probe.on_fit_end(trainer)

    marks = json.loads(probe_file.read_text())["memory_marks"]
    assert marks == {
        "sanity_check_end": {"peak_reserved_gib": 1.0, "reserved_gib": 1.0},
        "step_1": {"peak_reserved_gib": 3.0, "reserved_gib": 2.0},
        "step_2": {"peak_reserved_gib": 3.0, "reserved_gib": 2.5},
        "validation_1_start": {"peak_reserved_gib": 4.0, "reserved_gib": 4.0},
        "validation_1_end": {"peak_reserved_gib": 4.0, "reserved_gib": 4.0},
        "fit_end": {"peak_reserved_gib": 5.0, "reserved_gib": 1.0},
    }


def test_fit_probe_splits_each_validated_epoch_outside_the_steps(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clock = {"now": 0.0}
    monkeypatch.setattr(tool.time, "time", lambda: clock["now"])
    monkeypatch.setattr(tool.torch.cuda, "is_available", lambda: False)
    probe, trainer, probe_file = _writing_probe(tool, monkeypatch, tmp_path)
    batch = {"images": SimpleNamespace(shape=(2, 3, 8, 8))}

    def at(now: float, hook: str, *args: object) -> None:
        clock["now"] = now
        getattr(probe, hook)(trainer, *args)

    at(1.0, "on_validation_start")  # the sanity check: no entry
    at(1.5, "on_validation_batch_start")
    at(2.0, "on_validation_batch_end")
    at(2.5, "on_validation_end")
    trainer.sanity_checking = False
    for epoch_start in (10.0, 20.0):
        at(epoch_start, "on_train_batch_start")
        at(epoch_start + 1.0, "on_train_batch_end", None, None, batch, 0)
        at(epoch_start + 1.25, "on_validation_start")
        at(epoch_start + 2.0, "on_validation_batch_start")
        at(epoch_start + 2.5, "on_validation_batch_end")
        at(epoch_start + 2.75, "on_validation_batch_start")
        at(epoch_start + 3.0, "on_validation_batch_end")
        at(epoch_start + 3.5, "on_validation_end")
    at(24.0, "on_fit_end")

    record = json.loads(probe_file.read_text())
    split = {
        "before_validation_s": 0.25,
        "first_batch_wait_s": 0.75,
        "batches_s": 1.0,
        "epoch_end_s": 0.5,
    }
    assert record["outside_split"] == [
        {**split, "after_validation_s": 6.5},  # to the next epoch's first batch
        split,  # the fit's last validation: nothing after it
    ]
    assert record["val_runs"] == 2


def test_fit_probe_leaves_memory_marks_empty_without_cuda(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tool.torch.cuda, "is_available", lambda: False)
    probe = tool.FitProbe()
    probe.on_sanity_check_end(SimpleNamespace(sanity_checking=True))
    assert probe.memory_marks == {}


def test_fit_probe_with_a_history_reports_who_held_the_peak(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started: list[dict[str, object]] = []
    frames = [{"filename": "/x/lucid_yolo/train/metrics/overlaps.py", "line": 85, "name": "f"}]
    trace = [
        {"action": "segment_alloc", "addr": 0, "size": 4096, "stream": 0, "frames": frames},
        {"action": "alloc", "addr": 0, "size": 3072, "stream": 0, "frames": frames},
        {"action": "free_completed", "addr": 0, "size": 3072, "stream": 0, "frames": frames},
    ]
    cuda = tool.torch.cuda
    monkeypatch.setattr(cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "synchronize", lambda: None)
    monkeypatch.setattr(cuda, "max_memory_reserved", lambda: 4096)
    monkeypatch.setattr(cuda, "memory_reserved", lambda: 4096)
    monkeypatch.setattr(cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cuda.memory, "_record_memory_history", lambda **kw: started.append(kw))
    monkeypatch.setattr(
        cuda.memory, "_snapshot", lambda: {"device_traces": [trace], "segments": []}
    )
    probe_file = tmp_path / "probe.json"
    monkeypatch.setenv(tool.PROBE_ENV, str(probe_file))
    monkeypatch.setenv(tool.HISTORY_ENV, "4")
    probe = tool.FitProbe()
    assert started == [{"max_entries": 4, "stacks": "python"}]
    trainer = SimpleNamespace(callback_metrics={}, world_size=1, is_global_zero=True)
    probe.on_fit_end(trainer)

    peaks = json.loads(probe_file.read_text())["memory_peaks"]
    assert peaks["allocated"]["bytes"] == 3072
    assert peaks["reserved"]["bytes"] == 4096
    assert peaks["allocated"]["sites"][0]["site"].startswith("train/metrics/overlaps.py:85")
    assert peaks["truncated"] is False

    monkeypatch.setenv(tool.HISTORY_ENV, "3")
    full = tool.FitProbe()
    full.on_fit_end(trainer)
    assert json.loads(probe_file.read_text())["memory_peaks"] == {"truncated": True, "events": 3}
