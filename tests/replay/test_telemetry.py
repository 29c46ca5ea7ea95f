"""Tests of telemetry: a flat dict of ints for loggers."""

from __future__ import annotations

from typing import NamedTuple

from lucid_yolo.replay import RetireReason, Telemetry, merge_telemetry, recording_cause


def test_telemetry_as_dict_is_flat_ints() -> None:
    telemetry = Telemetry(recordings=1, replays=5, graph_launches=10)
    telemetry.native_calls["warm-up"] += 2
    telemetry.retirements[RetireReason.CAPTURE_FAILED] += 1
    telemetry.ungraded["o2o"] += 3
    telemetry.recorded["inputs"] += 1
    flat = telemetry.as_dict(prefix="replay/")
    assert flat["replay/native_calls"] == 2
    assert flat["replay/native.warm-up"] == 2
    assert flat["replay/retired.capture-failed"] == 1
    assert flat["replay/ungraded.o2o"] == 3
    assert flat["replay/recorded.inputs"] == 1
    assert all(isinstance(v, int) for v in flat.values())


def test_merge_telemetry_sums_counters() -> None:
    a, b = Telemetry(replays=2, pool_bytes=10), Telemetry(replays=3, pool_bytes=5)
    a.native_calls["no-grad"] += 1
    b.native_calls["no-grad"] += 2
    a.recorded["first"] += 1
    b.recorded["first"] += 1
    total = merge_telemetry(a, b)
    assert total.replays == 5
    assert total.pool_bytes == 10
    assert total.native_calls["no-grad"] == 3
    assert total.recorded["first"] == 2


class _Key(NamedTuple):
    shapes: tuple[int, ...]
    lr: float


def test_recording_cause_of_the_first_recording_is_first() -> None:
    assert recording_cause(None, _Key((8,), 0.1)) == "first"


def test_recording_cause_names_the_changed_fields() -> None:
    assert recording_cause(_Key((8,), 0.1), _Key((16,), 0.1)) == "shapes"
    assert recording_cause(_Key((8,), 0.1), _Key((16,), 0.2)) == "shapes+lr"


def test_recording_cause_of_keys_without_fields_is_key() -> None:
    assert recording_cause((8, 0.1), (16, 0.1)) == "key"
