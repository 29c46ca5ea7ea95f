"""The step profile's reading of a trace: the GPU's busy time is the union of its activities, its
idle gaps are split by length, and its work per step is counted by kind, kernel time and kernel
name."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from tool_modules import load_tool
from torch.autograd import DeviceType


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
    busy, gaps = tool.busy_and_gaps(tool.device_events(trace))
    assert busy == pytest.approx(2.0)
    assert gaps == [pytest.approx(1500.0)]  # from the copy's end to the memset


def test_busy_time_of_a_trace_without_device_work_is_zero(tool: ModuleType, tmp_path: Path) -> None:
    events = tool.device_events(_trace(tmp_path, [{"cat": "cpu_op", "ts": 0, "dur": 5}]))
    assert tool.busy_and_gaps(events) == (0.0, [])


def test_idle_gaps_split_into_the_devices_own_latency_and_waits_for_work(
    tool: ModuleType, tmp_path: Path
) -> None:
    trace = _trace(
        tmp_path,
        [
            {"cat": "kernel", "ts": 0, "dur": 10},
            {"cat": "kernel", "ts": 12, "dur": 10},  # 2 us after the first
            {"cat": "kernel", "ts": 25, "dur": 5},  # 3 us
            {"cat": "kernel", "ts": 50, "dur": 5},  # 20 us: at the cut, a wait
            {"cat": "kernel", "ts": 555, "dur": 5},  # 500 us
        ],
    )
    _, gaps = tool.busy_and_gaps(tool.device_events(trace))
    assert tool.gap_split(gaps, steps=2) == {
        "under_us": 20.0,
        "short_per_step": 1.0,
        "short_ms": 0.003,
        "long_per_step": 1.0,
        "long_ms": 0.26,
    }


def test_device_work_counts_each_kind_per_step_and_ranks_kernels_by_their_time(
    tool: ModuleType, tmp_path: Path
) -> None:
    trace = _trace(
        tmp_path,
        [
            *({"cat": "kernel", "name": "conv", "ts": 100 * i, "dur": 40} for i in range(4)),
            *({"cat": "kernel", "name": "add", "ts": 1000 + 10 * i, "dur": 2} for i in range(5)),
            {"cat": "kernel", "name": "add", "ts": 1200, "dur": 10},  # at the cut: not short
            {"cat": "kernel", "name": "gemm", "ts": 2000, "dur": 100},
            *({"cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 3000, "dur": 500} for _ in "ab"),
            {"cat": "gpu_memset", "name": "Memset", "ts": 4100, "dur": 1},
            {"cat": "kernel", "name": "unplaced", "dur": 7},  # no timestamp: not an activity
            {"cat": "cpu_op", "name": "conv", "ts": 0, "dur": 9000},
        ],
    )
    work = tool.device_work(tool.device_events(trace), steps=2, count=2)
    assert work["per_step"] == {"kernel": 5.5, "gpu_memcpy": 1.0, "gpu_memset": 0.5}
    assert work["kernel_ms"] == pytest.approx((160 + 10 + 10 + 100) / 1000 / 2)
    assert work["short_kernels"] == {"under_us": 10.0, "per_step": 2.5, "ms": 0.005}
    assert work["median_kernel_us"] == 10.0  # of the kernels alone: with the copies, 25
    assert [(k["name"], k["per_step"], k["ms"], k["mean_us"]) for k in work["top_kernels"]] == [
        ("conv", 2.0, 0.08, 40.0),
        ("gemm", 0.5, 0.05, 100.0),
    ]


def test_device_work_of_a_trace_without_kernels_has_no_median(
    tool: ModuleType, tmp_path: Path
) -> None:
    events = tool.device_events(_trace(tmp_path, [{"cat": "cpu_op", "ts": 0, "dur": 5}]))
    work = tool.device_work(events, 1, 5)
    assert work["kernel_ms"] == 0.0
    assert work["median_kernel_us"] is None
    assert work["top_kernels"] == []


class _Trainer:
    def __init__(self, max_steps: int) -> None:
        self.max_steps = max_steps
        self.global_step = 0


def test_window_times_the_unprofiled_steps_apart_from_the_profiled_ones(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = tool._Window(3, 6, cuda=False)
    trainer = _Trainer(max_steps=10)
    monkeypatch.setattr(tool.time, "perf_counter", lambda: float(trainer.global_step))
    for step in range(1, 11):
        trainer.global_step = step
        window.on_train_batch_end(trainer)
    # the clock reads the step: steps 4-6 unprofiled, 7-10 profiled
    assert (window.plain_steps, window.plain_seconds) == (3, 3.0)
    assert (window.steps, window.seconds) == (4, 4.0)
    assert window.host.getstats(), "the profiled window ran under cProfile"


@pytest.mark.parametrize(("plain_start", "start"), [(0, 4), (4, 4), (5, 4)])
def test_window_refuses_an_empty_unprofiled_window(
    tool: ModuleType, plain_start: int, start: int
) -> None:
    with pytest.raises(ValueError, match="unprofiled window"):
        tool._Window(plain_start, start, cuda=False)


def test_operators_rank_by_their_own_device_time_per_step(tool: ModuleType) -> None:
    def average(
        key: str, count: int, device_us: float, device_type: DeviceType = DeviceType.CPU
    ) -> SimpleNamespace:
        return SimpleNamespace(
            key=key,
            input_shapes=[[4, 16]],
            count=count,
            self_device_time_total=device_us,
            device_type=device_type,
        )

    class Profile:
        def key_averages(self, group_by_input_shape: bool) -> list[SimpleNamespace]:
            assert group_by_input_shape
            return [
                average("aten::add", 40, 400.0),
                average("aten::view", 80, 0.0),  # no kernel of its own: left out
                average("aten::native_batch_norm", 20, 3000.0),
                # the kernel itself, also listed: counted once, inside its operator
                average("batch_norm_collect_statistics_kernel", 20, 2000.0, DeviceType.CUDA),
            ]

    rows = tool.ops_by_device_time(Profile(), steps=2, count=5)
    assert [(row["op"], row["calls"], row["device_ms"]) for row in rows] == [
        ("aten::native_batch_norm", 10.0, 1.5),
        ("aten::add", 20.0, 0.2),
    ]
    assert rows[0]["input_shapes"] == "[[4, 16]]"


def test_launch_split_groups_device_work_by_graph_and_by_the_operator_that_launched_it(
    tool: ModuleType, tmp_path: Path
) -> None:
    def launch(name: str, correlation: int, ts: float) -> dict[str, object]:
        return {
            "cat": "cuda_runtime",
            "name": name,
            "tid": 7,
            "ts": ts,
            "dur": 2,
            "args": {"correlation": correlation},
        }

    def kernel(name: str, correlation: int, ts: float, dur: float) -> dict[str, object]:
        return {
            "cat": "kernel",
            "name": name,
            "ts": ts,
            "dur": dur,
            "args": {"correlation": correlation},
        }

    trace = _trace(
        tmp_path,
        [
            launch("cudaGraphLaunch", 1, 0),
            *(kernel(name, 1, 10 + 10 * i, 5) for i, name in enumerate(("conv", "bn", "silu"))),
            {"cat": "cpu_op", "name": "aten::to", "tid": 7, "ts": 40, "dur": 30},
            {"cat": "cpu_op", "name": "aten::copy_", "tid": 7, "ts": 45, "dur": 20},
            {"cat": "cpu_op", "name": "aten::empty", "tid": 7, "ts": 41, "dur": 2},  # ended before
            launch("cudaLaunchKernel", 2, 50),
            kernel("copy", 2, 100, 4),  # 65 us after the graph's last kernel ended: a wait
            launch("cudaGraphLaunch", 3, 200),
            *(kernel(name, 3, 210 + 6 * i, 5) for i, name in enumerate(("conv", "bn", "silu"))),
            kernel("stray", 9, 300, 1),  # its launch is not in the trace
        ],
    )
    split = tool.launch_split(tool.trace_events(trace), steps=2)
    rows = {row["group"]: row for row in split["groups"]}
    graph = rows["graph: 3 nodes, first conv"]
    assert (graph["per_step"], graph["activities_per_launch"]) == (1.0, 3.0)
    assert graph["ms"] == pytest.approx(6 * 5 / 1000 / 2)  # 6 kernels of 5 us in 2 steps
    assert graph["span_ms"] == pytest.approx((25 + 17) / 1000 / 2)
    assert (rows["eager: aten::copy_"]["per_step"], rows["eager: aten::copy_"]["ms"]) == (
        0.5,
        0.002,
    )
    assert "eager: ?" in rows
    # rounded to microseconds, ranked by the wait
    assert list(split["waits_before"].items()) == [
        ("graph: 3 nodes, first conv", pytest.approx((210 - 104) / 1000 / 2, abs=1e-3)),
        ("eager: ?", pytest.approx((300 - 227) / 1000 / 2, abs=1e-3)),
        ("eager: aten::copy_", pytest.approx((100 - 35) / 1000 / 2, abs=1e-3)),
    ]
