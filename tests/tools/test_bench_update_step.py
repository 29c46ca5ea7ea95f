"""The update benchmark's CPU part: what one native MuSGD + EMA update of a model launches."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_update_step", TOOLS / "bench_update_step.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_update_step", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_describe_counts_the_update_of_yolo26n(bench: ModuleType) -> None:
    described = bench.describe("yolo26n")
    assert described["tensors"] == 366
    assert described["buckets"] == 41
    # five Newton-Schulz iterations of three batched products per matrix-shape bucket
    assert described["kernels_by_op"]["bmm"] == 5 * 3 * described["buckets"]
    # the EMA's buffer copies are grouped: no single-tensor copy is left in the update
    assert "copy_" not in described["kernels_by_op"]
    assert described["kernels"] == sum(described["kernels_by_op"].values())
