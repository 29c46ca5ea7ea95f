"""The curve plot of the training-gate tool is a valid SVG with one line per metric."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

TOOL = Path(__file__).resolve().parents[2] / "tools" / "train_gate.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_gate", TOOL)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_curve_svg_draws_both_metrics_over_the_epochs() -> None:
    rows = [
        {"epoch": 0.0, "mAP50": 0.0, "mAP50-95": 0.0},
        {"epoch": 29.0, "mAP50": 1.0, "mAP50-95": 0.5},
    ]
    root = ET.fromstring(_tool().curve_svg(rows, "detect"))
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2
    map50 = [tuple(map(float, p.split(","))) for p in lines[0].get("points", "").split()]
    # epoch 0 at value 0 is the bottom-left corner, the last epoch at 1.0 the top-right one
    assert map50 == [(40.0, 260.0), (440.0, 40.0)]
