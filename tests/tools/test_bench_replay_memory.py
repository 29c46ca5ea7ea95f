"""The replay memory benchmark runs each fit in its own process and attributes memory to owners."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
import torch
from replay_nets import loss_of, make_net
from tool_modules import load_tool

from lucid_yolo.replay import ModuleRegion, RegionRecorder, UpdateRecorder


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("bench_replay_memory", monkeypatch)


def test_segments_by_owner_splits_graph_pools_from_streams(bench: ModuleType) -> None:
    segments = [
        {"total_size": 100, "allocated_size": 60, "stream": 0, "segment_pool_id": (0, 0)},
        {"total_size": 50, "allocated_size": 0, "stream": 7, "segment_pool_id": (0, 0)},
        {"total_size": 30, "allocated_size": 30, "stream": 7, "segment_pool_id": (1, 2)},
        {"total_size": 20, "allocated_size": 10, "stream": 7, "segment_pool_id": (1, 2)},
    ]
    owners = bench.segments_by_owner(segments)
    assert owners == {
        "stream 0": {"reserved": 100, "allocated": 60, "segments": 1},
        "stream 7": {"reserved": 50, "allocated": 0, "segments": 1},
        "pool (1, 2)": {"reserved": 50, "allocated": 40, "segments": 2},
    }


def test_ratios_are_replay_over_native_and_none_without_cuda_numbers(bench: ModuleType) -> None:
    native = {"peak_reserved": 1000, "peak_allocated": 800}
    replay = {"peak_reserved": 1500, "peak_allocated": 1000}
    assert bench.ratios(native, replay) == {"peak_reserved": 1.5, "peak_allocated": 1.25}
    cpu = {"peak_reserved": None, "peak_allocated": None}
    assert bench.ratios(cpu, cpu) == {"peak_reserved": None, "peak_allocated": None}


def _replay_fit(peaks: list[int], pool_bytes: int) -> dict[str, object]:
    per_step = [{"peak_reserved": peak} for peak in peaks]
    return {
        "peak_reserved": peaks[-1],
        "per_step": per_step,
        "telemetry": {"pool_bytes": pool_bytes},
        "attribution": None,
    }


def test_budget_splits_the_replayed_peak_at_the_pool(bench: ModuleType) -> None:
    native = {"peak_reserved": 1000}
    replay = _replay_fit([500, 1200, 1300, 1300], pool_bytes=900)
    assert bench.budget(native, replay) == {
        "step": 3,
        "pool": 900,
        "outside_pool": 400,
        "allowed_outside_pool": 200,
    }


def test_budget_reads_the_pool_at_the_peak_from_the_trace(bench: ModuleType) -> None:
    replay = _replay_fit([1300], pool_bytes=900)
    owners = {"pool (0, 1)": 700, "pool (0, 2)": 100, "stream 0": 500}
    replay["attribution"] = {"reserved": {"reserved_by_owner": owners}}
    found = bench.budget({"peak_reserved": 1000}, replay)
    assert (found["pool"], found["outside_pool"], found["allowed_outside_pool"]) == (800, 500, 300)


def test_budget_table_has_a_row_per_case_with_cuda_numbers(bench: ModuleType) -> None:
    gpu = {"native": {"peak_reserved": 2**30}, "replay": _replay_fit([2**31], pool_bytes=2**30)}
    cpu = {"native": {"peak_reserved": None}, "replay": {"peak_reserved": None}}
    cases = [{"task": "detect", "batch": 16, **gpu}, {"task": "detect", "batch": 4, **cpu}]
    rows = bench.budget_table(cases).splitlines()[2:]
    assert rows == ["| detect b16 | 1 | 1.000 | 1.000 | 0.100 |"]
    assert bench.budget_table(cases[1:]) == ""


@pytest.mark.slow
def test_cpu_smoke_mode_writes_both_fits_of_a_case(bench: ModuleType, tmp_path: Path) -> None:
    bench.main(
        [
            "--device", "cpu",
            "--cases", "detect:1",
            "--imgsz", "64",
            "--steps", "3",
            "--images", "4",
            "--val-images", "2",
            "--validate", "1",
            "--workers", "0",
            "--jobs", "2",
            "--history",
            "--root", str(tmp_path / "data"),
            "--out", str(tmp_path / "out"),
        ]
    )  # fmt: skip
    report = json.loads((tmp_path / "out" / "replay_memory.json").read_text())
    (case,) = report["cases"]
    assert "error" not in case["native"], case["native"]
    assert "error" not in case["replay"], case["replay"]
    assert case["native"]["telemetry"]["replays"] == 0
    # the sanity check; the fit stops at its third step, inside its first epoch of four
    assert case["native"]["validations"] == case["replay"]["validations"] == 1
    # step 1 warms up, step 2 records, step 3 replays the network with its loss (one region,
    # the default) and the update; the sanity check ran the evaluation forward natively, to
    # record at the first validation after the training graphs, which this fit does not reach
    assert case["replay"]["telemetry"]["recordings"] == 2
    assert case["replay"]["telemetry"]["replays"] > 0
    assert case["replay"]["peak_reserved"] is None
    assert case["replay"]["attribution"] is None  # no allocator trace without CUDA
    assert case["replay"]["loan_reading_ms"] is None
    assert "| detect b1 |" in (tmp_path / "out" / "replay_memory.md").read_text()


def test_loan_lines_name_each_replayed_fit_that_measured_its_loan_reading(
    bench: ModuleType,
) -> None:
    cases = [
        {"task": "detect", "batch": 16, "native": {}, "replay": {"loan_reading_ms": 4.25}},
        {"task": "detect", "batch": 4, "native": {}, "replay": {"loan_reading_ms": None}},
    ]
    text = bench.loan_lines(cases)
    assert "- detect b16: the evaluation loan's reading" in text
    assert "4.25 ms" in text
    assert "b4" not in text
    assert bench.loan_lines(cases[1:]) == ""


def test_watch_recordings_logs_memory_around_each_recording(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    for cls, name in ((RegionRecorder, "_record_or_retire"), (UpdateRecorder, "_record")):
        monkeypatch.setattr(cls, name, getattr(cls, name))  # restored after the test
    monkeypatch.setattr(bench, "_memory", lambda: {"reserved": 0})
    log: list[dict[str, object]] = []
    bench._watch_recordings(log)
    recorder = RegionRecorder(ModuleRegion(make_net()), name="net", warmup_steps=0)
    for _ in range(2):
        loss_of(recorder(torch.randn(2, 3, 8, 8)), torch.randn(2, 4, 8, 8)).backward()
    assert log == [{"recorder": "net", "before": {"reserved": 0}, "after": {"reserved": 0}}]
    assert recorder.telemetry.replays == 2


def test_site_tables_list_the_largest_sites_of_each_peak(bench: ModuleType) -> None:
    peak = {
        "index": 3,
        "step": 2,
        "bytes": 3 * 2**30,
        "sites": [{"owner": "stream 0", "site": "a.py:1 f", "bytes": 2**30, "blocks": 4}],
    }
    replay = {"attribution": {"allocated": peak}}
    case = {"task": "detect", "batch": 16, "native": {}, "replay": replay}
    text = bench.site_tables([case])
    assert "detect b16 replay, peak allocated: 3.000 GiB in step 2" in text
    assert "| stream 0 | `a.py:1 f` | 1.000 | 4 |" in text


def test_attribution_reads_the_allocator_snapshot_and_marks_steps(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = {"filename": "/repo/tools/bench_replay_memory.py", "line": 1, "name": "_mark_step"}
    net = {"filename": "/src/lucid_yolo/models/blocks.py", "line": 9, "name": "forward"}

    def event(action: str, addr: int, size: int, *frames: dict[str, object]) -> dict[str, object]:
        return {"action": action, "addr": addr, "size": size, "stream": 0, "frames": list(frames)}

    trace = [
        event("segment_alloc", 0, 100),
        event("alloc", 0, 60, net),
        event("free_completed", 0, 60),
        event("alloc", 0, 1, mark),
        event("free_completed", 0, 1),
        event("alloc", 0, 30, net),
        event("alloc", 40, 1, mark),
    ]
    snapshot = {
        "segments": [{"address": 0, "total_size": 100, "segment_pool_id": (0, 0)}],
        "device_traces": [trace],
    }
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda: snapshot)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    report = bench._attribution(max_entries=7)
    assert report["truncated"] is True
    assert (report["allocated"]["step"], report["allocated"]["bytes"]) == (1, 60)
    assert report["outside_pools_last_step"]["bytes"] == 30  # the end marker is not counted
    assert report["steps_marked"] == 2
