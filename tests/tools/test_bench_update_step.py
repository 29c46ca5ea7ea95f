"""The update benchmark's CPU part: what one native MuSGD + EMA update of a model launches."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from tool_modules import load_tool


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("bench_update_step", monkeypatch)


@pytest.mark.slow
def test_describe_counts_the_update_of_yolo26n(bench: ModuleType) -> None:
    described = bench.describe("yolo26n")
    assert described["tensors"] == 366
    assert described["shapes"] == 41
    stacks = len(described["ns_stacks"])
    assert stacks < 10
    # five Newton-Schulz iterations of three batched products per padded stack
    products = described["kernels_by_op"]["bmm"] + described["kernels_by_op"]["baddbmm"]
    assert products == 5 * 3 * stacks
    # the EMA's buffer copies are grouped: no single-tensor copy is left in the update
    assert "copy_" not in described["kernels_by_op"]
    assert described["kernels"] == sum(described["kernels_by_op"].values())


@pytest.mark.slow
def test_the_timed_update_takes_the_newton_schulz_dtype_and_steps(bench: ModuleType) -> None:
    from dispatch_count import VIEW_OPS, DispatchCount

    optimizer, _ = bench._build("yolo26n", "cpu", replay=False, ns_steps=0)
    assert (optimizer.ns_dtype, optimizer.ns_steps) == (torch.float32, 0)
    with DispatchCount(ignore=VIEW_OPS) as count:
        optimizer.step()
    assert {"bmm", "baddbmm"}.isdisjoint(count.ops)
    optimizer, _ = bench._build("yolo26n", "cpu", replay=False, ns_dtype=torch.bfloat16)
    assert (optimizer.ns_dtype, optimizer.ns_steps) == (torch.bfloat16, 5)
