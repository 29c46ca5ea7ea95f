"""The validation profile's pure parts: sync counter, host-split parts, switch intervals."""

from __future__ import annotations

import sys
from argparse import Namespace
from types import ModuleType
from typing import Any

import pytest
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("profile_validation", monkeypatch)


def _counter_with_passed_on(tool: ModuleType) -> tuple[Any, list[str]]:
    counter = tool.SyncCounter()
    passed_on: list[str] = []
    counter._previous = lambda message, *_: passed_on.append(str(message))
    return counter, passed_on


def test_sync_counter_counts_each_synchronisation_torch_reports(tool: ModuleType) -> None:
    counter, passed_on = _counter_with_passed_on(tool)
    for _ in range(2):
        counter._record(UserWarning("called a synchronizing CUDA operation"), UserWarning)
    assert counter.summary()["per_pass"] == 2
    assert passed_on == []


def test_sync_counter_passes_on_the_debug_mode_notice(tool: ModuleType) -> None:
    # switching the mode on warns once per process that it "does not yet detect all
    # synchronizing operations": counted, it was the one unexplained sync per pass of session 4
    counter, passed_on = _counter_with_passed_on(tool)
    notice = (
        "Synchronization debug mode is a prototype feature and does not yet detect all "
        "synchronizing operations"
    )
    counter._record(UserWarning(notice), UserWarning)
    assert counter.summary()["per_pass"] == 0
    assert passed_on == [notice]


def test_host_split_parts_all_exist(tool: ModuleType) -> None:
    # a part renamed in the package would make the GPU run fail at its start
    for owner, names in tool.UPDATE_PARTS.items():
        for name in names:
            assert callable(getattr(owner, name)), (owner, name)


def test_switch_intervals_alternate_pass_by_pass_and_are_put_back(tool: ModuleType) -> None:
    clock = tool.PhaseClock()
    seen: list[float] = []

    class Trainer:
        def validate(self, *_: object, **__: object) -> None:
            seen.append(sys.getswitchinterval())
            clock.seconds["update"] += 1.0 if sys.getswitchinterval() < 0.001 else 3.0

    default = sys.getswitchinterval()
    args = Namespace(repeats=2, switch_intervals=[0.005, 0.0005])
    result = tool._by_switch_interval(Trainer(), None, None, clock, args)
    assert seen == pytest.approx([0.005, 0.0005, 0.005, 0.0005])
    assert sys.getswitchinterval() == default
    assert result["0.005"]["update"] == pytest.approx(3.0)
    assert result["0.0005"]["update"] == pytest.approx(1.0)
    assert set(result["0.005"]) == {"pass", "update"}
