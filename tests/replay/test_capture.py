"""Tests of capture safety helpers: op naming and autocast-cache emulation."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.replay import CaptureError
from lucid_yolo.replay._capture import (
    autocast_cache_emulation,
    capture_with_trail,
    describe_failure,
)


def test_capture_with_trail_rejects_item_on_cpu_stand_in() -> None:
    with pytest.raises(CaptureError, match=r"_local_scalar_dense.*\.item\(\)") as info:
        capture_with_trail(lambda: torch.ones(2).sum().item(), True)
    assert info.value.op == "aten._local_scalar_dense"


def test_capture_with_trail_names_boolean_mask_indexing() -> None:
    x = torch.randn(4)
    with pytest.raises(CaptureError, match=r"nonzero.*boolean-mask"):
        capture_with_trail(lambda: x[x > 0], True)


def test_capture_with_trail_passes_safe_code_through() -> None:
    assert torch.equal(capture_with_trail(lambda: torch.ones(2) * 2, True), torch.full((2,), 2.0))


def test_capture_with_trail_wraps_other_errors_with_last_op() -> None:
    def fails() -> None:
        torch.ones(2).add(1)
        raise RuntimeError("operation failed due to a previous error during capture")

    with pytest.raises(CaptureError, match=r"RuntimeError at aten\.add: operation failed"):
        capture_with_trail(fails, False)


def test_describe_failure_for_out_of_memory() -> None:
    assert "out of memory" in describe_failure(torch.cuda.OutOfMemoryError("x"), None)


def test_autocast_cache_emulation_keeps_the_cache_off_when_the_caller_has_it_off() -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        with autocast_cache_emulation("cpu"):
            assert not torch.is_autocast_cache_enabled()
        assert not torch.is_autocast_cache_enabled()


def test_autocast_cache_emulation_keeps_the_cache_on_when_the_caller_has_it_on() -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with autocast_cache_emulation("cpu"):
            assert torch.is_autocast_cache_enabled()
        assert torch.is_autocast_cache_enabled()


def test_autocast_cache_emulation_is_noop_without_autocast() -> None:
    before = torch.is_autocast_cache_enabled()
    with autocast_cache_emulation("cpu"):
        assert torch.is_autocast_cache_enabled() == before
