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


def test_device_work_counts_each_kind_per_step_and_ranks_kernels_by_their_time(
    tool: ModuleType, tmp_path: Path
) -> None:
    trace = _trace(
        tmp_path,
        [
            *({"cat": "kernel", "name": "conv", "ts": 100 * i, "dur": 40} for i in range(4)),
            *({"cat": "kernel", "name": "add", "ts": 1000 + 10 * i, "dur": 2} for i in range(10)),
            {"cat": "kernel", "name": "gemm", "ts": 2000, "dur": 100},
            {"cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 3000, "dur": 50},
            {"cat": "gpu_memset", "name": "Memset", "ts": 3100, "dur": 1},
            {"cat": "cpu_op", "name": "conv", "ts": 0, "dur": 9000},
        ],
    )
    work = tool._device_work(trace, steps=2, count=2)
    assert work["per_step"] == {"kernel": 7.5, "gpu_memcpy": 0.5, "gpu_memset": 0.5}
    assert work["kernel_ms"] == pytest.approx((160 + 20 + 100) / 1000 / 2)
    assert work["short_kernels"] == {"under_us": 10.0, "per_step": 5.0, "ms": 0.01}
    assert work["median_kernel_us"] == 2.0
    assert [(k["name"], k["per_step"], k["ms"], k["mean_us"]) for k in work["top_kernels"]] == [
        ("conv", 2.0, 0.08, 40.0),
        ("gemm", 0.5, 0.05, 100.0),
    ]


def test_device_work_of_a_trace_without_kernels_has_no_median(
    tool: ModuleType, tmp_path: Path
) -> None:
    work = tool._device_work(_trace(tmp_path, [{"cat": "cpu_op", "ts": 0, "dur": 5}]), 1, 5)
    assert work["kernel_ms"] == 0.0
    assert work["median_kernel_us"] is None
    assert work["top_kernels"] == []
