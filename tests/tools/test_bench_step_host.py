"""The step-host benchmark on the CPU: what it times is the replay library's real bookkeeping."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from tool_modules import load_tool


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("bench_step_host", monkeypatch)


@pytest.mark.slow
def test_measure_reports_the_bookkeeping_of_yolo26n(bench: ModuleType) -> None:
    measured = bench.measure("yolo26n", "cpu", repeat=1, rounds=1)
    assert measured["parameters"] == 366
    # route hands every parameter a private gradient of its own, all in one call into torch
    # (on a torch without _foreach_clone: an empty_like each and one grouped copy)
    assert measured["route_dispatches"] == (1 if hasattr(torch, "_foreach_clone") else 367)
    assert measured["route_kernels"] is None
    timed = [key for key in measured if key.endswith("_us")]
    assert len(timed) == 7
    assert all(measured[key] > 0 for key in timed)


@pytest.mark.slow
def test_graph_ops_counts_each_graph_of_the_step(bench: ModuleType) -> None:
    ops = bench.graph_ops("yolo26n")
    assert set(ops) == {"network_forward", "network_backward", "update"}
    # the Newton-Schulz products of a few padded stacks, the momentum, the blend and the EMA
    assert ops["update"] > 5 * 3
    assert ops["network_backward"] > 0
