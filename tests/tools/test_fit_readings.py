"""tools/fit_readings.py: each fit's readings for the goal table, from a side-by-side report."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from side_by_side_runs import replayed_run, ultralytics_run
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("fit_readings", monkeypatch)


def test_a_replayed_fit_gets_its_fixed_costs_step_and_ratio(tool: ModuleType) -> None:
    report = {"runs": [ultralytics_run(90.0), replayed_run(40.0, 6.0), ultralytics_run(110.0)]}
    rows = tool.readings(report, "b16")
    fit = rows[1]
    assert fit["× Ultralytics"] == pytest.approx(100.0 / 40.0)  # the Ultralytics fits' median
    assert fit["first epoch s"] == 6.0
    assert fit["steady epoch s"] == 2.0  # the epochs after the first
    assert fit["step ms"] == 20.0
    assert fit["without data wait"] == 18.0
    assert fit["update ms"] == 2.0
    assert fit["data wait host %"] == pytest.approx(10.0)
    assert fit["data wait device %"] == pytest.approx(100.0 / 19.0)  # 1 ms of a 19 ms period
    assert fit["between steps ms"] == 1.0
    assert fit["outside steps %"] == pytest.approx(50.0)  # 50 steps of 20 ms in a 2 s epoch
    assert fit["mAP50-95"] == 0.9  # the last validation's
    assert rows[0]["× Ultralytics"] is None
    assert rows[0]["step ms"] is None


def test_with_the_round_ratio_a_fit_is_read_against_its_own_rounds_ultralytics_fit(
    tool: ModuleType,
) -> None:
    second = {**replayed_run(50.0, 6.0), "repeat": 1}
    runs = [ultralytics_run(90.0), replayed_run(40.0, 6.0), second, ultralytics_run(110.0)]
    report = {"runs": runs}
    report["runs"][3]["repeat"] = 1
    rows = tool.readings(report, "b16", ratio="round")
    assert rows[1]["× Ultralytics"] == pytest.approx(90.0 / 40.0)
    assert rows[2]["× Ultralytics"] == pytest.approx(110.0 / 50.0)
    alone = {**replayed_run(40.0, 6.0), "repeat": 2}  # a round without Ultralytics
    assert (
        tool.readings({"runs": [ultralytics_run(90.0), alone]}, "b16", "round")[1]["× Ultralytics"]
        is None
    )
    with pytest.raises(ValueError, match="ratio='mean'"):
        tool.readings(report, "b16", ratio="mean")


def test_a_replayed_fits_peak_is_read_against_the_native_fits_of_its_report(
    tool: ModuleType,
) -> None:
    native = {**replayed_run(90.0, 6.0), "tool": "native", "peak_reserved_gib": 2.0}
    rows = tool.readings({"runs": [replayed_run(40.0, 6.0), native]}, "memory")
    assert rows[0]["× native peak"] == pytest.approx(1.25)
    assert rows[1]["× native peak"] is None
    assert tool.readings({"runs": [replayed_run(40.0, 6.0)]}, "b16")[0]["× native peak"] is None


def test_a_fit_that_failed_is_left_out_and_a_report_without_ultralytics_has_no_ratio(
    tool: ModuleType,
) -> None:
    failed = {**ultralytics_run(50.0), "exit": 1}
    rows = tool.readings({"runs": [failed, replayed_run(40.0, 6.0)]}, "b16")
    assert [row["tool"] for row in rows] == ["replay"]
    assert rows[0]["× Ultralytics"] is None


def test_the_command_prints_one_table_row_a_fit_in_each_columns_format(
    tmp_path: Path, tool: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "side_by_side.json"
    report.write_text(json.dumps({"runs": [replayed_run(40.0, 6.0), ultralytics_run(100.0)]}))
    tool.main([str(report)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| report | task | tool |")
    assert len(lines) == 4
    cells = [cell.strip() for cell in lines[2].strip("|").split("|")]
    assert cells[4:8] == ["40.0", "2.50", "6.00", "6.00"]
    assert lines[3].count("—") == 11  # no ratios, no epochs, no phases
