"""The whole fit's time left, printed after each epoch."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lucid_yolo.cli.time_left import TimeLeft, clock_text, time_left_line


@pytest.mark.parametrize(("seconds", "text"), [(5, "0:05"), (123.4, "2:03"), (3725, "1:02:05")])
def test_clock_text(seconds: float, text: str) -> None:
    assert clock_text(seconds) == text


def test_time_left_line_extrapolates_the_mean_epoch() -> None:
    assert time_left_line(3, 12, 30.0) == "epoch 3 of 12 done: 0:30 elapsed, about 1:30 left"


def test_time_left_line_without_a_total_gives_no_estimate() -> None:
    assert time_left_line(3, None, 30.0) == "epoch 3 done: 0:30 elapsed"


def test_time_left_prints_after_each_epoch(capsys: pytest.CaptureFixture[str]) -> None:
    ticks = iter([100.0, 120.0])
    callback = TimeLeft(clock=lambda: next(ticks))
    trainer = SimpleNamespace(max_epochs=5, current_epoch=0)
    callback.on_train_start(trainer, None)  # type: ignore[arg-type]
    callback.on_train_epoch_end(trainer, None)  # type: ignore[arg-type]
    assert capsys.readouterr().out == "epoch 1 of 5 done: 0:20 elapsed, about 1:20 left\n"
