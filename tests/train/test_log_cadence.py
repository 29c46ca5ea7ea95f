"""Values logged during training are logged where they reach the loggers or the epoch's end."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from lucid_yolo.train.log_cadence import reaches_loggers


def _trainer(every: int = 4, should_stop: bool = False) -> Any:
    return SimpleNamespace(
        log_every_n_steps=every, num_training_batches=10, max_steps=7, should_stop=should_stop
    )


@pytest.mark.parametrize(
    ("step", "batch_idx", "reached"),
    [(4, 0, True), (5, 1, False), (6, 9, True), (7, 2, True), (8, 3, True), (3, 8, False)],
    ids=["logging-step", "other", "epoch-end", "last-step", "next-logging-step", "before-end"],
)
def test_a_value_reaches_loggers_on_logging_steps_epoch_ends_and_the_last_step(
    step: int, batch_idx: int, reached: bool
) -> None:
    assert reaches_loggers(_trainer(), step, batch_idx) is reached


def test_a_stopping_trainer_logs_as_lightning_does() -> None:
    assert reaches_loggers(_trainer(should_stop=True), 5, 1)


def test_no_step_is_a_logging_step_when_logging_is_off() -> None:
    assert not reaches_loggers(_trainer(every=0), 4, 0)
    assert reaches_loggers(_trainer(every=0), 5, 9)  # the epoch's summary still reads it
