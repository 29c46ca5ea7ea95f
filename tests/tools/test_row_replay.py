"""The benchmark rows' replay: one definition, read as flags by the fits and as a configuration
by the profiling tools."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from tool_modules import load_tool

from lucid_yolo.cli.main import main
from lucid_yolo.train import ReplayConfig


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("row_replay", monkeypatch)


def test_the_rows_replay_network_and_loss_as_one_region_the_update_and_evaluation(
    tool: ModuleType,
) -> None:
    rows = ReplayConfig(**tool.ROW_REPLAY)
    assert rows.joins_network_and_loss
    assert (rows.update, rows.evaluation, rows.segment_heads) == (True, True, False)
    training = ReplayConfig(**tool.TRAINING_REPLAY)
    assert training.joins_network_and_loss
    assert (training.update, training.evaluation) == (True, False)


def test_every_flag_is_an_option_of_fit(
    tool: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    help_text = capsys.readouterr().out
    flags = tool.replay_flags(tool.ROW_REPLAY)
    assert len(flags) == 4
    for flag in flags:
        option, value = flag.split("=")
        assert value == "true"
        assert f"{option} " in help_text, option


def test_the_side_by_side_fits_replay_what_the_rows_replay(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = load_tool("bench_side_by_side", monkeypatch)
    options = {"batch": 2, "imgsz": 64, "epochs": 1, "cpu": False}
    where = ("detect", Path("d.yaml"), Path("r"))
    replayed = bench.lucid_fit_arguments(*where, replay=True, **options)
    native = bench.lucid_fit_arguments(*where, replay=False, **options)
    assert [a for a in replayed if a.startswith("--model.replay")] == tool.replay_flags()
    assert not any(a.startswith("--model.replay") for a in native)
