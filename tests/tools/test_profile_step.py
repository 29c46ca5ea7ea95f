"""The step profile's reading of a trace: the GPU's busy time is the union of its activities."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("profile_step", monkeypatch)


def _trace(tmp_path: Path, events: list[dict[str, object]]) -> Path:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_busy_time_counts_overlapping_device_work_once(tool: ModuleType, tmp_path: Path) -> None:
    trace = _trace(
        tmp_path,
        [
            {"cat": "kernel", "ts": 0, "dur": 1000},
            {"cat": "gpu_memcpy", "ts": 500, "dur": 1000},  # overlaps the kernel by 500 us
            {"cat": "kernel", "ts": 600, "dur": 100},  # inside both
            {"cat": "gpu_memset", "ts": 3000, "dur": 500},
            {"cat": "cpu_op", "ts": 0, "dur": 9000},  # host work is not the device's
        ],
    )
    assert tool._busy_ms(trace) == pytest.approx(2.0)


def test_busy_time_of_a_trace_without_device_work_is_zero(tool: ModuleType, tmp_path: Path) -> None:
    assert tool._busy_ms(_trace(tmp_path, [{"cat": "cpu_op", "ts": 0, "dur": 5}])) == 0.0
