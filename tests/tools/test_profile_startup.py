"""The start-up profile's reading of ``-X importtime`` lines and its tables."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from tool_modules import load_tool

IMPORTTIME = """\
import time: self [us] | cumulative | imported package
import time:       100 |        100 |       torch._C
import time:    200000 |     200100 |     torch
import time:      5000 |       5000 |         lightning.fabric.utilities.imports
import time:     30000 |      35000 |       lightning
import time:       900 |     236000 | lucid_yolo.cli.lightning_cli
lucid-yolo fit: yolo26n on cpu
"""


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("profile_startup", monkeypatch)


def test_import_times_add_own_seconds_per_top_level_package(tool: ModuleType) -> None:
    imports = tool.import_times(IMPORTTIME)
    assert imports["own_by_package_s"] == pytest.approx(
        {"torch": 0.2001, "lightning": 0.035, "lucid_yolo": 0.0009}
    )
    assert imports["total_s"] == pytest.approx(0.236)


def test_import_times_list_heavy_modules_cumulative(tool: ModuleType) -> None:
    cumulative = tool.import_times(IMPORTTIME)["cumulative_s"]
    assert cumulative == pytest.approx(
        {
            "torch": 0.2001,
            "lightning.fabric.utilities.imports": 0.005,
            "lightning": 0.035,
            "lucid_yolo.cli.lightning_cli": 0.236,
        }
    )


def test_report_indents_calls_under_their_phase_in_start_order(tool: ModuleType) -> None:
    marks = {
        "interpreter_s": 0.05,
        "imports_s": 8.0,
        "calls": {
            "model built": {"start_s": 9.1, "each_s": [0.3]},
            "classes instantiated": {"start_s": 9.0, "each_s": [0.5]},
            "RAM cache filled": {"start_s": 9.6, "each_s": [0.3, 0.1]},
        },
        "first_batch_s": 12.0,
        "steps_s": [2.0, 1.0, 0.1, 0.1],
        "exit_code": 0,
    }
    table = tool.report(marks, None)
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert rows[3:6] == [
        "| classes instantiated | 9.00 | 0.50 |",
        "|   model built | 9.10 | 0.30 |",
        "|   RAM cache filled (0.30 + 0.10) | 9.60 | 0.40 |",
    ]
    assert "| first half's seconds above that median (recording, warm-up) | 2.80 |" in table


def test_steady_step_is_the_median_of_the_last_half(tool: ModuleType) -> None:
    assert tool.steady_step([5.0, 4.0, 0.2, 0.1, 0.3]) == pytest.approx(0.2)


def test_report_says_first_when_the_fit_failed(tool: ModuleType) -> None:
    marks = {
        "interpreter_s": 0.1,
        "imports_s": 8.0,
        "calls": {},
        "first_batch_s": 0.0,
        "steps_s": [],
        "exit_code": 2,
    }
    assert tool.report(marks, None).startswith("**The fit failed (exit code 2); see fit.log.**")


def test_op_profile_writes_a_window_s_operators_by_own_and_total_seconds_and_shape(
    tool: ModuleType, tmp_path: Path
) -> None:
    import torch

    ops = tool._OpProfile(tmp_path)
    ops.start()
    torch.mm(torch.ones(8, 8), torch.ones(8, 8))
    ops.stop("window")
    text = (tmp_path / "ops_window.txt").read_text()
    by_own, by_total, by_shape = text.split("\n\n\n")
    assert by_own.startswith("window: operators by self cpu time total")
    assert by_total.startswith("window: operators by cpu time total")
    assert by_shape.startswith("window: operators by self cpu time total, per input shape")
    assert "aten::mm" in by_own
    assert "aten::mm" in by_total
    assert "[[8, 8], [8, 8]]" in by_shape
