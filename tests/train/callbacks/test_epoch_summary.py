"""The per-epoch validation table and replay line are built from logged metrics only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from lightning.pytorch.trainer.states import TrainerFn
from rich.console import Console

from lucid_yolo.train.callbacks import EpochSummary, replay_line, skipped_line, validation_table


def _render(table: object) -> str:
    console = Console(width=120, record=True)
    console.print(table)
    return console.export_text()


def test_validation_table_one_row_per_kind() -> None:
    metrics = {
        "val/box/P": 0.5,
        "val/box/R": 0.25,
        "val/box/mAP50": 0.75,
        "val/box/mAP50-95": 0.5,
        "val/mask/mAP50-95": 0.125,
        "train/loss": 3.0,
    }
    text = _render(validation_table(metrics, epoch=3))
    assert "epoch 3" in text
    assert "box" in text
    assert "0.7500" in text
    assert "mask" in text
    assert "0.1250" in text


def test_validation_table_without_an_epoch_has_a_plain_title() -> None:
    text = _render(validation_table({"val/box/mAP50": 0.5}, epoch=None))
    assert "validation" in text
    assert "epoch" not in text


def test_test_table_reads_the_test_metrics_only() -> None:
    metrics = {"val/box/mAP50-95": 0.5, "test/box/mAP50-95": 0.25}
    text = _render(validation_table(metrics, epoch=None, stage="test"))
    assert text.splitlines()[0].strip() == "test"
    assert "0.2500" in text
    assert "0.5000" not in text


def test_validation_table_none_without_validation_metrics() -> None:
    assert validation_table({"train/loss": 1.0}, epoch=0) is None


def test_replay_line_lists_retirement_reasons() -> None:
    line = replay_line(
        {"replay/recordings": 1.0, "replay/replays": 9.0, "replay/retired.forward-altered": 1.0}
    )
    assert line is not None
    assert "recordings 1" in line
    assert "replays 9" in line
    assert "forward-altered 1" in line


def test_replay_line_none_when_replay_off() -> None:
    assert replay_line({"val/box/mAP50": 0.1}) is None


def test_skipped_line_counts_non_finite_steps() -> None:
    line = skipped_line({"train/non_finite_skipped": 3.0, "val/box/mAP50": 0.1})
    assert line == "non-finite loss: 3 step(s) skipped so far"


def test_skipped_line_none_without_skips() -> None:
    assert skipped_line({"train/non_finite_skipped": 0.0}) is None
    assert skipped_line({}) is None


def _trainer(metrics: dict[str, float]) -> SimpleNamespace:
    return SimpleNamespace(
        sanity_checking=False,
        callback_metrics=metrics,
        state=SimpleNamespace(fn=TrainerFn.FITTING),
        current_epoch=2,
    )


LONG_REPLAY = {
    f"replay/{k}": 1000.0
    for k in ("recordings", "replays", "graph_launches", "native_calls", "retirements")
}
"""Counters whose line is longer than the 80 columns rich wraps at where stdout is no terminal."""


def test_epoch_summary_prints_the_replay_and_skipped_lines_unbroken(
    capsys: pytest.CaptureFixture[str],
) -> None:
    metrics = {**LONG_REPLAY, "train/non_finite_skipped": 2.0}
    line = replay_line(metrics)
    assert line is not None
    assert len(line) > 80
    EpochSummary().on_validation_end(_trainer(metrics), None)  # type: ignore[arg-type]
    assert capsys.readouterr().out.splitlines() == [
        line,
        "non-finite loss: 2 step(s) skipped so far",
    ]


def test_epoch_summary_prints_the_test_run_s_replay_line_unbroken(
    capsys: pytest.CaptureFixture[str],
) -> None:
    EpochSummary().on_test_end(_trainer(LONG_REPLAY), None)  # type: ignore[arg-type]
    assert capsys.readouterr().out.splitlines() == [replay_line(LONG_REPLAY)]
