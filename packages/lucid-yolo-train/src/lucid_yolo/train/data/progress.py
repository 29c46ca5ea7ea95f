"""Progress lines with a time estimate for long data work (decoding a split into a cache).

Filling a cache of a large split takes minutes before the first training step; a user watching a
silent terminal cannot tell a slow disk from a hang. :class:`Progress` prints nothing for work
that ends quickly, then one line every few seconds with the count, the elapsed time and an
estimate of the time left from the rate so far.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lightning.pytorch.utilities import rank_zero_info


def _clock_text(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Counts finished items and reports every ``every`` seconds once ``after`` seconds passed.

    Args:
        what: what is being done, e.g. ``"data: train: caching images"``.
        total: items to do.
        every: seconds between two lines.
        after: seconds of silence before the first line (quick work prints nothing).
        clock: monotonic seconds (a test passes its own).
        emit: where a line goes (rank-zero logging by default).
    """

    def __init__(
        self,
        what: str,
        total: int,
        *,
        every: float = 5.0,
        after: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        emit: Callable[[str], None] = rank_zero_info,
    ) -> None:
        self.what = what
        self.total = total
        self.every = every
        self.done = 0
        self._clock = clock
        self._emit = emit
        self._start = clock()
        self._next = self._start + after

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


__all__ = ["Progress"]
