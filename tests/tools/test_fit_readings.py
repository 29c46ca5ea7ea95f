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


def _cut_ultralytics(cut_s: float, epoch_ends: list[float]) -> dict[str, object]:
    epochs = [{"epoch": e, "fit_s": end, "box": 0.5} for e, end in enumerate(epoch_ends)]
    return {**ultralytics_run(cut_s), "exit": -1, "epoch_metrics": epochs}


def test_a_cut_fit_is_bounded_by_its_fastest_epoch_of_each_phase_not_yet_begun(
    tool: ModuleType,
) -> None:
    cut = _cut_ultralytics(100.0, [10.0, 20.0, 29.0, 37.0])  # epochs 1-3 took 10, 9, 8 s
    # 16 planned, the last ten (6-15) without mosaic: epoch 4 under way at the cut, epoch 5 at
    # the mosaic epochs' fastest pace; no epoch of the last phase finished, so it adds nothing
    report = {"args": {"epochs": "16"}, "runs": [cut, replayed_run(40.0, 6.0)]}
    (row,) = tool.cut_readings(report, "b4")
    assert row["cut at s"] == 100.0
    assert row["epochs finished"] == "4 of 16"
    assert row["fastest epoch s"] == 8.0
    assert row["mean epoch s"] == pytest.approx(9.0)
    assert row["whole fit at least s"] == pytest.approx(108.0)
    assert row["lucid-yolo fits × at least"] == "replay #0 2.70×"
    # 12 planned: epochs 2-11 are the last phase, finished at 9 and 8 s; 5-11 not begun
    report["args"] = {"epochs": "12"}
    (row,) = tool.cut_readings(report, "b4")
    assert row["whole fit at least s"] == pytest.approx(100.0 + 7 * 8.0)
    # the last phase's first epoch (2) is its fastest: it counts towards that phase
    report["runs"][0] = _cut_ultralytics(100.0, [10.0, 20.0, 25.0, 34.0])
    (row,) = tool.cut_readings(report, "b4")
    assert row["whole fit at least s"] == pytest.approx(100.0 + 7 * 5.0)


def test_an_epoch_without_its_time_still_counts_as_finished(tool: ModuleType) -> None:
    cut = _cut_ultralytics(100.0, [10.0, 20.0, 29.0, 37.0])
    cut["epoch_metrics"][3]["fit_s"] = None  # type: ignore[index]
    (row,) = tool.cut_readings({"args": {"epochs": "16"}, "runs": [cut]}, "b4")
    assert row["epochs finished"] == "4 of 16"
    # epoch 4 under way; 5 at the mosaic epochs' fastest timed pace (9 s), 6-15 untimed
    assert row["whole fit at least s"] == pytest.approx(109.0)


def test_a_cut_fit_is_read_against_the_finished_lucid_yolo_fits_of_its_task_and_round(
    tool: ModuleType,
) -> None:
    def replay(whole_s: float, **changes: object) -> dict[str, object]:
        return {**replayed_run(whole_s, 6.0), **changes}

    runs = [
        _cut_ultralytics(100.0, [10.0, 20.0, 29.0, 37.0]),
        replay(40.0),
        replay(50.0, exit=1),
        replay(20.0, task="segment"),
        replay(25.0, repeat=1),
        ultralytics_run(90.0),
    ]
    (row,) = tool.cut_readings({"args": {"epochs": "16"}, "runs": runs}, "b4")
    assert row["lucid-yolo fits × at least"] == "replay #0 2.70×"
    cut_replay = {**replay(100.0, exit=-1), "epoch_metrics": runs[0]["epoch_metrics"]}
    native = {**replay(40.0), "tool": "native"}
    (row,) = tool.cut_readings({"args": {"epochs": "16"}, "runs": [cut_replay, native]}, "b4")
    assert row["whole fit at least s"] == pytest.approx(108.0)
    assert row["lucid-yolo fits × at least"] is None  # a bound on a lucid-yolo fit, not a peer


def test_a_cut_fit_without_its_planned_epochs_or_lucid_fits_has_no_bound_or_ratio(
    tool: ModuleType,
) -> None:
    cut = _cut_ultralytics(100.0, [10.0, 20.0])
    (row,) = tool.cut_readings({"runs": [cut, replayed_run(40.0, 6.0)]}, "b4")
    assert row["epochs finished"] == "2 of ?"
    assert row["whole fit at least s"] is None
    assert row["lucid-yolo fits × at least"] is None
    (row,) = tool.cut_readings({"args": {"epochs": "30"}, "runs": [cut]}, "b4")
    assert row["whole fit at least s"] is not None
    assert row["lucid-yolo fits × at least"] is None
    failed = {**ultralytics_run(50.0), "exit": 1}  # failed, not cut: no bound to read
    assert tool.cut_readings({"args": {"epochs": "30"}, "runs": [failed]}, "b4") == []
    (row,) = tool.cut_readings({"args": {"epochs": "1"}, "runs": [cut]}, "b4")
    assert row["whole fit at least s"] is None  # the report plans fewer epochs than finished


def test_the_command_prints_the_cut_fits_in_a_table_of_their_own(
    tmp_path: Path, tool: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "side_by_side.json"
    runs = [replayed_run(40.0, 6.0), _cut_ultralytics(100.0, [10.0, 20.0, 29.0, 37.0])]
    report.write_text(json.dumps({"args": {"epochs": "16"}, "runs": runs}))
    tool.main([str(report)])
    out = capsys.readouterr().out
    assert "Fits cut at the benchmark's timeout:" in out
    assert f"| {report} | detect | ultralytics | 0 | 100.0 | 4 of 16 | 8.00 | 9.00 | 108.0 |" in out
    report.write_text(json.dumps({"runs": [replayed_run(40.0, 6.0)]}))
    tool.main([str(report)])
    assert "cut" not in capsys.readouterr().out
