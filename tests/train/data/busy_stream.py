"""Whether a host-to-device copy runs beside the current stream's work or queues behind it."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

SLEEP_CYCLES = 4_000_000_000
"""About two seconds of a GPU's clock: long beside a copy of a few megabytes."""


def copied_while_the_stream_is_busy(move: Callable[[], Tensor], source: Tensor) -> Tensor:
    """Queue a long sleep on the current stream, then ``move()`` (a copy of ``source`` to the
    GPU), and require the copy's bytes to be readable from another stream while the sleep still
    runs; the moved tensor is returned for the caller's reads on the current stream.

    A first, zeroed copy reserves the memory beforehand, so that no allocation waits during the
    sleep, and leaves zeros, not the source's bytes, where the timed copy lands.
    """
    move().zero_()
    torch.cuda.synchronize()
    busy = torch.cuda.current_stream()
    torch.cuda._sleep(SLEEP_CYCLES)
    moved = move()
    observer = torch.cuda.Stream()
    arrived = False
    while not arrived and not busy.query():
        with torch.cuda.stream(observer):
            arrived = torch.equal(moved.to("cpu"), source)
    assert arrived, "the copy waited for the current stream's work"
    assert not busy.query(), "the sleep ended before the copy was read: lengthen SLEEP_CYCLES"
    return moved
