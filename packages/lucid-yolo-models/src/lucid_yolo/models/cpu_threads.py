"""Torch's CPU operators on one thread, for work made of tiny operators.

Splitting an operator of microseconds over the intra-op pool buys nothing, and when the cores are
busy (a fit's loader workers decoding on every core, a shared CI runner) every operator waits for
pool threads that are not running: the model summary took 0.19-6.4 s with two threads and
0.06-0.18 s with one on a loaded 2-core machine (``docs/engineering/whole-fit-speed.md``,
session 10).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def one_cpu_thread() -> Iterator[None]:
    """The block runs torch's CPU operators on one thread; the caller's count is put back."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


__all__ = ["one_cpu_thread"]
