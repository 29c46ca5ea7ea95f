"""The host split: wall seconds and calls per wrapped function, every kind of callable put back."""

from __future__ import annotations

import time
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


def _module() -> Any:
    def inner(seconds: float) -> float:
        time.sleep(seconds)
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


def test_host_split_counts_nested_calls_inside_their_callers(tool: ModuleType) -> None:
    module = _module()
    inner = module.inner
    split = tool.HostSplit()
    split.wrap_all([(module, "outer"), (module, "inner")])
    for _ in range(2):
        module.outer(0.01)
    split.restore()
    assert module.inner is inner
    rows = {row["function"]: row for row in split.table(passes=2)}
    assert rows["mod.inner"]["calls_per_pass"] == 2
    assert rows["mod.outer"]["calls_per_pass"] == 1
    assert rows["mod.inner"]["seconds_per_pass"] >= 0.02
    assert rows["mod.outer"]["seconds_per_pass"] >= rows["mod.inner"]["seconds_per_pass"]
    assert split.table(passes=2)[0]["function"] == "mod.outer"


def test_host_split_counts_a_call_that_raises(tool: ModuleType) -> None:
    def fails() -> None:
        raise ValueError("no")

    module = SimpleNamespace(__name__="m", fails=fails)
    split = tool.HostSplit()
    split.wrap(module, "fails")
    with pytest.raises(ValueError, match="no"):
        module.fails()
    assert split.calls["m.fails"] == 1
