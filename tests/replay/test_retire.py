"""Tests of typed retirement: warned once per reason, counted, scoped."""

from __future__ import annotations

import warnings

import pytest

from lucid_yolo.replay import ReplayRetiredWarning, RetireLog, RetireReason


def test_retire_log_warns_once_per_reason() -> None:
    log = RetireLog("net")
    with pytest.warns(ReplayRetiredWarning, match="net: capture-failed: boom"):
        log.record(RetireReason.CAPTURE_FAILED, "boom")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        log.record(RetireReason.CAPTURE_FAILED, "boom again")
    assert log.counts[RetireReason.CAPTURE_FAILED] == 2
    assert [str(r) for r in log.history][1] == "net: capture-failed: boom again"


def test_retire_log_warns_for_each_new_reason() -> None:
    log = RetireLog("net")
    with pytest.warns(ReplayRetiredWarning, match="for good"):
        log.record(RetireReason.FORWARD_ALTERED, "x")
    with pytest.warns(ReplayRetiredWarning, match="for this signature"):
        log.record(RetireReason.SIGNATURE_LIMIT, "y")


@pytest.mark.parametrize(
    ("reason", "permanent"),
    [
        (RetireReason.CAPTURE_FAILED, False),
        (RetireReason.SIGNATURE_LIMIT, False),
        (RetireReason.UNSUPPORTED_INPUT, False),
        (RetireReason.PARITY_MISMATCH, True),
        (RetireReason.SHARED_PARAMETER, True),
        (RetireReason.SHARED_INPUT, True),
        (RetireReason.INTERLEAVED, False),
        (RetireReason.INPUTS_CHANGED, False),
    ],
)
def test_retire_reason_scope(reason: RetireReason, permanent: bool) -> None:
    assert reason.permanent is permanent


@pytest.mark.parametrize(
    ("reason", "scope"),
    [
        (RetireReason.FORWARD_ALTERED, "for good"),
        (RetireReason.CAPTURE_FAILED, "for this signature"),
        (RetireReason.INTERLEAVED, "for this call"),
    ],
)
def test_retire_reason_scope_is_warned(reason: RetireReason, scope: str) -> None:
    assert reason.scope == scope
    with pytest.warns(ReplayRetiredWarning, match=f"retired {scope}: net: {reason.value}"):
        RetireLog("net").record(reason, "detail")


def test_retire_reason_values_are_kebab_case() -> None:
    assert all(r.value == r.value.lower() and " " not in r.value for r in RetireReason)
