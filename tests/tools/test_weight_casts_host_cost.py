"""tools/weight_casts_host_cost.py: times the scopes alone and puts the real copies back."""

from __future__ import annotations

import pytest
from tool_modules import load_tool

import lucid_yolo.models.weight_casts as weight_casts


def test_times_both_grad_modes_and_restores_the_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    tool = load_tool("weight_casts_host_cost", monkeypatch)
    copies = weight_casts._converted
    times = tool.per_forward_ms("yolo26n", repeats=2)
    assert set(times) == {False, True}
    assert all(ms > 0 for ms in times.values())
    assert weight_casts._converted is copies
