"""Counters shared between DataLoader workers and the main process.

Augmentation runs in worker processes, so a plain attribute incremented there is invisible to the
trainer. :class:`DataCounters` holds one row of int64 counters per process in a shared-memory
array: each worker writes only its own row (no locks, no races) and the main process sums the rows.
This is how dropped and overflowing instances are reported without changing the Batch contract.
"""

from __future__ import annotations

import multiprocessing
from typing import Final

import numpy as np
import numpy.typing as npt
from torch.utils.data import get_worker_info

from lucid_yolo.train.data.augment.sample import DropCounts

FIELDS: Final[tuple[str, ...]] = (
    "samples",
    "dropped_too_small",
    "dropped_outside",
    "dropped_degenerate",
    "overflow",
)
"""Counter names, in column order."""


class DataCounters:
    """Per-process counter rows in shared memory (module docstring).

    Args:
        workers: DataLoader workers that may write (row 0 is the main process).
    """

    def __init__(self, workers: int) -> None:
        self._shape = (workers + 1, len(FIELDS))
        # a lock-free shared array survives both fork and spawn (it travels with the worker's
        # start arguments); the numpy view over it is rebuilt on every access
        self._shared = multiprocessing.RawArray("q", self._shape[0] * self._shape[1])

    def _rows(self) -> npt.NDArray[np.int64]:
        return np.frombuffer(self._shared, dtype=np.int64).reshape(self._shape)

    def record(self, drops: DropCounts, overflow: int) -> None:
        """Count one produced sample, its dropped and its overflowing instances."""
        info = get_worker_info()
        row = 0 if info is None else info.id + 1
        self._rows()[row] += (1, drops.too_small, drops.outside, drops.degenerate, overflow)

    def totals(self) -> dict[str, int]:
        """Sum over all processes, by counter name."""
        sums = self._rows().sum(axis=0).tolist()
        return dict(zip(FIELDS, (int(v) for v in sums), strict=True))

    def reset(self) -> None:
        """Zero every counter (e.g. at the start of an epoch)."""
        self._rows()[:] = 0


__all__ = ["FIELDS", "DataCounters"]
