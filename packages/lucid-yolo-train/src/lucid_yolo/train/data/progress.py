"""What the data side tells the user while it loads: one-off lines and progress with an estimate.

Reading the labels and image headers of a large split, or filling a cache, takes minutes before
the first training step; a user watching a silent terminal cannot tell a slow disk from a hang.
:class:`Progress` prints nothing for work that ends quickly, then one line every few seconds with
the count, the elapsed time and an estimate of the time left from the rate so far.

Every line goes to stdout through :func:`lucid_yolo.train.console.print_line`, the trainer's
one home for lines a user reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from lucid_yolo.train.console import print_line

QUIET_SECONDS = 2.0
"""Seconds of silence before a :class:`Progress`'s first line: quick work prints nothing."""

EVERY_SECONDS = 5.0
"""Seconds between two lines of a :class:`Progress`."""

_Item = TypeVar("_Item")


def _clock_text(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Counts finished items and reports every ``every`` seconds once ``after`` seconds passed.

    Args:
        what: what is being done, e.g. ``"data: train: caching images"``.
        total: items to do.
        every: seconds between two lines (default :data:`EVERY_SECONDS`).
        after: seconds of silence before the first line (default :data:`QUIET_SECONDS`).
        clock: monotonic seconds (a test passes its own).
        emit: where a line goes (:func:`~lucid_yolo.train.console.print_line` by default).
    """

    def __init__(
        self,
        what: str,
        total: int,
        *,
        every: float | None = None,
        after: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        emit: Callable[[str], None] = print_line,
    ) -> None:
        self.what = what
        self.total = total
        # read at construction, so that a test can shorten them for every Progress at once
        self.every = EVERY_SECONDS if every is None else every
        self.done = 0
        self._clock = clock
        self._emit = emit
        self._start = clock()
        self._next = self._start + (QUIET_SECONDS if after is None else after)

    def advance(self, count: int = 1) -> None:
        """Record ``count`` more finished items; print a line if one is due."""
        self.done += count
        now = self._clock()
        if now < self._next or self.done >= self.total:
            return
        self._next = now + self.every
        elapsed = now - self._start
        left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        self._emit(
            f"{self.what}: {self.done:,}/{self.total:,}, {_clock_text(elapsed)} elapsed, "
            f"about {_clock_text(left)} left"
        )

    def track(self, items: Iterable[_Item]) -> Iterator[_Item]:
        """Yield ``items``, each counted as finished when the loop asks for the next one."""
        for item in items:
            yield item
            self.advance()


__all__ = ["EVERY_SECONDS", "QUIET_SECONDS", "Progress"]
