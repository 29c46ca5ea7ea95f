"""tools/fit_readings.py: each fit's readings for the goal table, from a side-by-side report."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("fit_readings", monkeypatch)


def replayed(whole_s: float, first_epoch_s: float) -> dict[str, object]:
    phases = {"data_ms": 2.0, "network_ms": 10.0, "backward_ms": 6.0, "update_ms": 2.0}
    return {
        "task": "detect",
        "tool": "replay",
        "repeat": 0,
        "exit": 0,
        "whole_s": whole_s,
        "startup_s": 6.0,
        "val_s": 3.0,
        "peak_reserved_gib": 2.5,
        "phases_ms": [{**phases, "between_steps_ms": 1.0}] * 4,
        "epochs": [{"wall_s": first_epoch_s, "steps": 50}] + [{"wall_s": 2.0, "steps": 50}] * 4,
        "epoch_metrics": [{"box": 0.5}, {"box": 0.9}],
    }


def ultralytics(whole_s: float) -> dict[str, object]:
    return {
        "task": "detect",
        "tool": "ultralytics",
        "repeat": 0,
        "exit": 0,
        "whole_s": whole_s,
        "startup_s": 4.0,
        "val_s": 12.0,
        "peak_reserved_gib": 3.0,
        "epoch_metrics": [{"box": 0.8}],
    }


def test_a_replayed_fit_gets_its_fixed_costs_step_and_ratio(tool: ModuleType) -> None:
    report = {"runs": [ultralytics(90.0), replayed(40.0, 6.0), ultralytics(110.0)]}
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
    second = {**replayed(50.0, 6.0), "repeat": 1}
    report = {"runs": [ultralytics(90.0), replayed(40.0, 6.0), second, ultralytics(110.0)]}
    report["runs"][3]["repeat"] = 1
    rows = tool.readings(report, "b16", ratio="round")
    assert rows[1]["× Ultralytics"] == pytest.approx(90.0 / 40.0)
    assert rows[2]["× Ultralytics"] == pytest.approx(110.0 / 50.0)
    alone = {**replayed(40.0, 6.0), "repeat": 2}  # a round without Ultralytics
    assert (
        tool.readings({"runs": [ultralytics(90.0), alone]}, "b16", "round")[1]["× Ultralytics"]
        is None
    )
    with pytest.raises(ValueError, match="ratio='mean'"):
        tool.readings(report, "b16", ratio="mean")


def test_a_replayed_fits_peak_is_read_against_the_native_fits_of_its_report(
    tool: ModuleType,
) -> None:
    native = {**replayed(90.0, 6.0), "tool": "native", "peak_reserved_gib": 2.0}
    rows = tool.readings({"runs": [replayed(40.0, 6.0), native]}, "memory")
    assert rows[0]["× native peak"] == pytest.approx(1.25)
    assert rows[1]["× native peak"] is None
    assert tool.readings({"runs": [replayed(40.0, 6.0)]}, "b16")[0]["× native peak"] is None


def test_a_fit_that_failed_is_left_out_and_a_report_without_ultralytics_has_no_ratio(
    tool: ModuleType,
) -> None:
    failed = {**ultralytics(50.0), "exit": 1}
    rows = tool.readings({"runs": [failed, replayed(40.0, 6.0)]}, "b16")
    assert [row["tool"] for row in rows] == ["replay"]
    assert rows[0]["× Ultralytics"] is None


def test_the_command_prints_one_table_row_a_fit_in_each_columns_format(
    tmp_path: Path, tool: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "side_by_side.json"
    report.write_text(json.dumps({"runs": [replayed(40.0, 6.0), ultralytics(100.0)]}))
    tool.main([str(report)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| report | task | tool |")
    assert len(lines) == 4
    cells = [cell.strip() for cell in lines[2].strip("|").split("|")]
    assert cells[4:8] == ["40.0", "2.50", "6.00", "6.00"]
    assert lines[3].count("—") == 11  # no ratios, no epochs, no phases
