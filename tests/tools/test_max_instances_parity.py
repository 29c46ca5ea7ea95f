"""The target-rows parity tool compares each fit with the first and says what differs."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("max_instances_parity", monkeypatch)


def _fit(
    rows: int, digests: dict[str, str], losses: list[str], overflow: int = 0
) -> dict[str, Any]:
    return {
        "rows": rows,
        "asked": rows,
        "digests": digests,
        "losses": losses,
        "val": [{"val/map": "00"}],
        "overflow": overflow,
    }


def test_compare_counts_the_tensors_that_differ_from_the_first_fit(tool: ModuleType) -> None:
    first = _fit(100, {"a": "1", "b": "2"}, ["x", "y"])
    same = _fit(24, {"a": "1", "b": "2"}, ["x", "y"])
    cut = _fit(6, {"a": "1", "b": "3"}, ["x", "z"], overflow=5)
    rows = tool.compare([first, same, cut])
    assert [(r["rows"], r["digests_differ"], r["losses_equal"]) for r in rows] == [
        (100, 0, True),
        (24, 0, True),
        (6, 1, False),
    ]
    text = tool.table({"detect": rows})
    assert "| detect | 24 | 24 | 0 | yes | yes | yes |" in text
    assert "| detect | 6 | 6 | 5 | no: 1 of 2 tensors differ | no | yes |" in text


def test_rows_read_auto_as_the_data_modules_choice(tool: ModuleType) -> None:
    assert tool._rows("auto") is None
    assert tool._rows("48") == 48
