"""Tests of telemetry: a flat dict of ints for loggers."""

from __future__ import annotations

from lucid_yolo.replay import RetireReason, Telemetry, merge_telemetry


def test_telemetry_as_dict_is_flat_ints() -> None:
    telemetry = Telemetry(recordings=1, replays=5, graph_launches=10)
    telemetry.native_calls["warm-up"] += 2
    telemetry.retirements[RetireReason.CAPTURE_FAILED] += 1
    telemetry.ungraded["o2o"] += 3
    flat = telemetry.as_dict(prefix="replay/")
    assert flat["replay/native_calls"] == 2
    assert flat["replay/native.warm-up"] == 2
    assert flat["replay/retired.capture-failed"] == 1
    assert flat["replay/ungraded.o2o"] == 3
    assert all(isinstance(v, int) for v in flat.values())


def test_merge_telemetry_sums_counters() -> None:
    a, b = Telemetry(replays=2, pool_bytes=10), Telemetry(replays=3, pool_bytes=5)
    a.native_calls["no-grad"] += 1
    b.native_calls["no-grad"] += 2
    total = merge_telemetry(a, b)
    assert total.replays == 5
    assert total.pool_bytes == 10
    assert total.native_calls["no-grad"] == 3
