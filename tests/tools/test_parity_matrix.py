"""The parity matrix's cases: which regions replay and how many replays each must show."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import ModuleType

import pytest
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("parity_matrix", monkeypatch)


def _fit(tool: ModuleType, micro_batches: int, updates: int) -> object:
    return tool._Fit({}, [], [], {}, 0, [], updates, micro_batches, {})


def test_a_segment_case_chains_its_regions_or_records_them_as_one(tool: ModuleType) -> None:
    chained = tool.Case("segment", "bf16-mixed", 2, "contiguous")
    one = tool.Case("segment", "bf16-mixed", 2, "contiguous", one_region=True)
    config = chained.replay_config()
    assert (config.segment_heads, config.loss_with_network) == (True, False)
    config = one.replay_config()
    assert (config.network, config.loss, config.update) == (True, True, True)
    assert (config.segment_heads, config.loss_with_network) == (False, True)
    assert one.name == "segment/bf16-mixed/acc2/contiguous/one-region"
    fit = _fit(tool, micro_batches=8, updates=4)
    assert tool._expected(fit, chained) == {
        "network": 7,
        "segment-heads": 7,
        "loss": 7,
        "optimizer MuSGD": 3,
    }
    assert tool._expected(fit, one) == {"network+loss": 7, "optimizer MuSGD": 3}


def _args(**overrides: object) -> argparse.Namespace:
    args = argparse.Namespace(
        tasks=["detect"],
        precisions=["bf16-mixed"],
        extra=[],
        accelerator="gpu",
        segment_heads=True,
        one_region=True,
        skip_passed=[],
        shard="1/1",
        limit=0,
    )
    vars(args).update(overrides)
    return args


def test_a_cut_run_goes_on_without_the_cases_it_passed(tool: ModuleType, tmp_path: Path) -> None:
    every = [case.name for case in tool._cases(_args())]
    assert len(every) == 6
    report = tmp_path / "cut.json"
    report.write_text(
        json.dumps([{"case": every[0], "passed": True}, {"case": every[1], "passed": False}])
    )
    left = [case.name for case in tool._cases(_args(skip_passed=[report]))]
    assert left == every[1:]
    halves = [tool._cases(_args(skip_passed=[report], shard=f"{i}/2")) for i in (1, 2)]
    assert [case.name for case in halves[0]] == left[0::2]
    assert [case.name for case in halves[1]] == left[1::2]


def test_a_report_that_is_not_the_matrix_s_is_refused_by_name(
    tool: ModuleType, tmp_path: Path
) -> None:
    report = tmp_path / "other.json"
    report.write_text(json.dumps({"rows": []}))
    with pytest.raises(SystemExit, match=r"--skip-passed .*other\.json: not a parity matrix"):
        tool._cases(_args(skip_passed=[report]))
    with pytest.raises(SystemExit, match=r"missing\.json"):
        tool._cases(_args(skip_passed=[tmp_path / "missing.json"]))


def test_a_run_may_not_write_over_a_report_it_skips_from(
    tool: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = tmp_path / "cut.json"
    report.write_text("[]")
    argv = ["parity_matrix", "--skip-passed", str(report), "--out", str(report)]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as stopped:
        tool.main()
    assert stopped.value.code == 2
    assert "is one of the --skip-passed reports: write elsewhere" in capsys.readouterr().err
    assert report.read_text() == "[]"
