"""The allocator-trace attribution finds each peak and names the blocks alive then."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from tool_modules import load_tool

MODEL = {"filename": "/src/lucid_yolo/models/blocks.py", "line": 10, "name": "forward"}
RECORD = {"filename": "/src/lucid_yolo/replay/recorder.py", "line": 350, "name": "_record"}
TORCH = {"filename": "/venv/site-packages/torch/nn/modules/conv.py", "line": 5, "name": "_conv"}
DATA = {"filename": "/src/lucid_yolo/train/data/hsv.py", "line": 7, "name": "hsv_on_device"}
MARK = {"filename": "/repo/tools/bench_replay_memory.py", "line": 1, "name": "_mark_step"}
POOL = (5000, 1000, "pool (0, 1)")


@pytest.fixture
def trace_tools(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("memory_trace", monkeypatch)


def _event(action: str, addr: int, size: int, *frames: dict[str, Any]) -> dict[str, Any]:
    return {"action": action, "addr": addr, "size": size, "stream": 0, "frames": list(frames)}


def _is_marker(event: dict[str, Any]) -> bool:
    return any(f["name"] == "_mark_step" for f in event.get("frames", ()))


def _trace() -> list[dict[str, Any]]:
    """Step 1: a warm-up pass of 700 bytes, freed, then 600 in the pool. Step 2: 50 for data."""
    return [
        _event("segment_alloc", 0, 1000),
        _event("alloc", 0, 100, TORCH, MODEL),  # live to the end
        _event("alloc", 100, 700, TORCH, MODEL, RECORD),  # the warm-up pass
        _event("free_completed", 100, 700),
        _event("segment_alloc", 5000, 1000),
        _event("alloc", 5000, 600, MODEL, RECORD),  # the capture, in the pool
        {"action": "oom"},  # other actions, without address or size, count for nothing
        _event("alloc", 900, 1, MARK),
        _event("free_completed", 900, 1),
        _event("alloc", 100, 50, DATA),
        _event("free_completed", 100, 50),
        _event("segment_free", 0, 1000),
        _event("alloc", 900, 1, MARK),
    ]


def test_site_of_names_the_project_frame_and_the_replay_frame_that_led_there(
    trace_tools: ModuleType,
) -> None:
    assert trace_tools.site_of([TORCH, MODEL, RECORD]) == (
        "models/blocks.py:10 forward < replay/recorder.py:350 _record"
    )
    assert trace_tools.site_of([TORCH, DATA]) == "train/data/hsv.py:7 hsv_on_device"
    assert trace_tools.site_of([TORCH]) == "torch/nn/modules/conv.py:5 _conv"
    trail = {
        "filename": "/src/lucid_yolo/replay/_capture.py",
        "line": 63,
        "name": "__torch_dispatch__",
    }
    assert trace_tools.site_of([trail, MODEL, RECORD]) == (
        "models/blocks.py:10 forward < replay/recorder.py:350 _record"
    )


def test_site_of_names_the_library_that_allocated_inside_a_tool_frame(
    trace_tools: ModuleType,
) -> None:
    fit = {"filename": "/repo/tools/bench_replay_memory.py", "line": 206, "name": "_fit"}
    strategy = {
        "filename": "/venv/site-packages/lightning/pytorch/strategies/single_device.py",
        "line": 80,
        "name": "model_to_device",
    }
    assert trace_tools.site_of([TORCH, strategy, fit]) == (
        "lightning/pytorch/strategies/single_device.py:80 model_to_device"
        " < bench_replay_memory.py:206 _fit"
    )
    assert trace_tools.site_of([TORCH, fit]) == "bench_replay_memory.py:206 _fit"
    assert trace_tools.site_of([TORCH, DATA, strategy, fit]) == "train/data/hsv.py:7 hsv_on_device"


def test_owner_of_tells_pool_addresses_from_streams(trace_tools: ModuleType) -> None:
    pools = trace_tools.pool_ranges(
        [
            {"address": 5000, "total_size": 1000, "segment_pool_id": (0, 1)},
            {"address": 0, "total_size": 1000, "segment_pool_id": (0, 0)},
        ]
    )
    assert pools == [POOL]
    assert trace_tools.owner_of({"addr": 5999}, pools) == "pool (0, 1)"
    assert trace_tools.owner_of({"addr": 6000, "stream": 7}, pools) == "stream 7"
    assert trace_tools.owner_of({"addr": 4999, "stream": 0}, pools) == "stream 0"


def test_find_peak_counts_blocks_alive_before_the_range(trace_tools: ModuleType) -> None:
    deltas = [5, -2, 1]
    assert trace_tools.find_peak(deltas) == (0, 5)
    assert trace_tools.find_peak(deltas, start=1) == (2, 4)
    assert trace_tools.find_peak(deltas, start=3) == (-1, 0)


def test_event_owners_follow_a_reused_address_from_a_stream_segment_to_a_pool(
    trace_tools: ModuleType,
) -> None:
    trace = [
        _event("segment_alloc", 5000, 1000),  # a stream's segment, freed later
        _event("alloc", 5000, 400, MODEL, RECORD),
        _event("free_completed", 5000, 400),
        _event("segment_free", 5000, 1000),
        _event("segment_alloc", 5000, 1000),  # the pool's, at the same address
        _event("alloc", 5000, 600, MODEL),
    ]
    owners = trace_tools.event_owners(trace, [POOL])
    assert owners == ["stream 0", "stream 0", "stream 0", "stream 0", POOL[2], POOL[2]]


def test_event_owners_name_the_pool_of_expandable_segments_mapped_piece_by_piece(
    trace_tools: ModuleType,
) -> None:
    # With expandable segments the snapshot lists the pool's whole range, and the trace maps
    # memory into it in pieces; a piece mapped for a stream and unmapped is not the pool's.
    trace = [
        _event("segment_map", 5000, 200),  # a stream's piece, unmapped before the pool's
        _event("segment_unmap", 5000, 200),
        _event("segment_map", 5000, 400),
        _event("alloc", 5000, 300, MODEL, RECORD),
        _event("segment_map", 5400, 600),
        _event("alloc", 5500, 500, MODEL),
        _event("segment_map", 9000, 100),  # beside the pool
        _event("alloc", 9000, 100, DATA),
    ]
    owners = trace_tools.event_owners(trace, [POOL])
    assert owners == ["stream 0", "stream 0", *[POOL[2]] * 4, "stream 0", "stream 0"]


def test_attribute_names_the_blocks_alive_at_the_allocated_peak(trace_tools: ModuleType) -> None:
    report = trace_tools.attribute(_trace(), [POOL], _is_marker)
    peak = report["allocated"]
    assert (peak["step"], peak["bytes"]) == (1, 800)
    assert peak["allocated_by_owner"] == {"stream 0": 800}
    assert peak["sites"] == [
        {
            "owner": "stream 0",
            "site": "models/blocks.py:10 forward < replay/recorder.py:350 _record",
            "bytes": 700,
            "blocks": 1,
        },
        {"owner": "stream 0", "site": "models/blocks.py:10 forward", "bytes": 100, "blocks": 1},
    ]


def test_attribute_reports_reserved_bytes_per_owner_at_the_reserved_peak(
    trace_tools: ModuleType,
) -> None:
    peak = trace_tools.attribute(_trace(), [POOL], _is_marker)["reserved"]
    assert peak["bytes"] == 2000
    assert peak["reserved_by_owner"] == {"stream 0": 1000, "pool (0, 1)": 1000}


def test_attribute_finds_the_last_steps_peak_outside_the_pools(trace_tools: ModuleType) -> None:
    peak = trace_tools.attribute(_trace(), [POOL], _is_marker)["outside_pools_last_step"]
    assert (peak["step"], peak["bytes"]) == (2, 150)
    assert peak["allocated_by_owner"] == {"stream 0": 150}
    sites = {row["site"]: row["bytes"] for row in peak["sites"]}
    assert sites == {"train/data/hsv.py:7 hsv_on_device": 50, "models/blocks.py:10 forward": 100}


def test_group_sites_sums_what_falls_below_the_top(trace_tools: ModuleType) -> None:
    events = [_event("alloc", 0, 5, MODEL), _event("alloc", 10, 3, DATA), _event("alloc", 20, 1)]
    rows = trace_tools.group_sites([(e, "stream 0") for e in events], top=1)
    assert rows[0]["bytes"] == 5
    assert rows[1] == {"owner": "*", "site": "other (2 sites)", "bytes": 4, "blocks": 2}
