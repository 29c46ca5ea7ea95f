"""After each epoch of ``fit``, one line with the time spent and an estimate of the time left.

The progress bar shows the current epoch's remaining time only; a user waiting for a whole fit
wants the whole run's. The estimate is the mean epoch time so far (validation included) times the
epochs still to run, so it settles after the first epoch (which also fills caches).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_only
from typing_extensions import override


def clock_text(seconds: float) -> str:
    """``H:MM:SS`` for an hour or more, else ``M:SS``."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def time_left_line(done: int, total: int | None, elapsed: float) -> str:
    """``epoch 3 of 12 done: 0:41 elapsed, about 2:03 left`` (no estimate without a total)."""
    if total is None or total < 1:
        return f"epoch {done} done: {clock_text(elapsed)} elapsed"
    left = elapsed / done * max(total - done, 0)
    spent = clock_text(elapsed)
    return f"epoch {done} of {total} done: {spent} elapsed, about {clock_text(left)} left"


class TimeLeft(Callback):
    """Print :func:`time_left_line` at the end of every training epoch (after its validation).

    Args:
        clock: seconds from an arbitrary origin; :func:`time.monotonic` unless a test says.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = 0.0

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = self._clock()

    @override
    @rank_zero_only
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        total = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
        done = trainer.current_epoch + 1
        print(time_left_line(done, total, self._clock() - self._start), flush=True)


__all__ = ["TimeLeft", "clock_text", "time_left_line"]
