"""The curve plot of the training-gate tool is a valid SVG with one line per metric."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from types import ModuleType

import pytest
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("train_gate", monkeypatch)


def test_curve_svg_draws_both_metrics_over_the_epochs(tool: ModuleType) -> None:
    rows = [
        {"epoch": 0.0, "mAP50": 0.0, "mAP50-95": 0.0},
        {"epoch": 29.0, "mAP50": 1.0, "mAP50-95": 0.5},
    ]
    root = ET.fromstring(tool.curve_svg(rows, "detect"))
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2
    map50 = [tuple(map(float, p.split(","))) for p in lines[0].get("points", "").split()]
    # epoch 0 at value 0 is the bottom-left corner, the last epoch at 1.0 the top-right one
    assert map50 == [(40.0, 260.0), (440.0, 40.0)]
