"""The host split: wall seconds and calls per wrapped function, every kind of callable put back."""

from __future__ import annotations

from itertools import count
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("host_split", monkeypatch)


class _Owner:
    def method(self, x: int) -> int:
        return x + 1

    @classmethod
    def made(cls, x: int) -> int:
        return x + 2

    @staticmethod
    def plain(x: int) -> int:
        return x + 3


class _Heir(_Owner):
    pass


def _module() -> Any:
    def inner(seconds: float) -> float:
        return seconds

    def outer(seconds: float) -> float:
        return module.inner(seconds) + module.inner(seconds)

    module = SimpleNamespace(__name__="pkg.mod", inner=inner, outer=outer)
    return module


def test_host_split_times_methods_classmethods_and_staticmethods(tool: ModuleType) -> None:
    split = tool.HostSplit()
    originals = dict(vars(_Owner))
    split.wrap_all([(_Owner, "method"), (_Owner, "made"), (_Owner, "plain")])
    assert (_Owner().method(1), _Owner.made(1), _Owner().plain(1)) == (2, 3, 4)
    assert dict(split.calls) == {"_Owner.method": 1, "_Owner.made": 1, "_Owner.plain": 1}
    split.restore()
    for name in ("method", "made", "plain"):
        assert vars(_Owner)[name] is originals[name]


def test_host_split_times_inherited_methods_and_puts_the_class_back(tool: ModuleType) -> None:
    split = tool.HostSplit()
    split.wrap_all([(_Heir, "method"), (_Heir, "made"), (_Heir, "plain")])
    assert (_Heir().method(1), _Heir.made(1), _Heir().plain(1)) == (2, 3, 4)
    assert dict(split.calls) == {"_Heir.method": 1, "_Heir.made": 1, "_Heir.plain": 1}
    split.restore()
    assert not {"method", "made", "plain"} & set(vars(_Heir))  # inherited again, not shadowed
    assert (_Heir().method(1), _Heir.made(1), _Heir().plain(1)) == (2, 3, 4)


def test_host_split_counts_nested_calls_inside_their_callers(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a clock that ticks a second a reading: each inner call takes 1 s, each outer call 5 s
    monkeypatch.setattr(tool, "time", SimpleNamespace(perf_counter=count().__next__))
    module = _module()
    inner = module.inner
    split = tool.HostSplit()
    split.wrap_all([(module, "outer"), (module, "inner")])
    for _ in range(2):
        module.outer(0.5)
    split.restore()
    assert module.inner is inner
    rows = {row["function"]: row for row in split.table(2)}
    assert rows["mod.inner"] == {
        "function": "mod.inner",
        "seconds_per_pass": 2,
        "calls_per_pass": 2,
    }
    assert rows["mod.outer"] == {
        "function": "mod.outer",
        "seconds_per_pass": 5,
        "calls_per_pass": 1,
    }
    assert split.table(2)[0]["function"] == "mod.outer"
    per_step = split.table(4, "step", milliseconds=True)
    assert per_step[0] == {"function": "mod.outer", "ms_per_step": 2500.0, "calls_per_step": 0.5}


def test_host_split_counts_a_call_that_raises(tool: ModuleType) -> None:
    def fails() -> None:
        raise ValueError("no")

    module = SimpleNamespace(__name__="m", fails=fails)
    split = tool.HostSplit()
    split.wrap(module, "fails")
    with pytest.raises(ValueError, match="no"):
        module.fails()
    assert split.calls["m.fails"] == 1
