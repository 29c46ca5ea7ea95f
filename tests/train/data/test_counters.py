"""DataCounters: per-process rows summed in the main process."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset

from lucid_yolo.train.data.augment import DropCounts
from lucid_yolo.train.data.counters import DataCounters


class _Counting(Dataset[int]):
    def __init__(self, counters: DataCounters) -> None:
        self.counters = counters

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        self.counters.record(DropCounts(too_small=1), overflow=index % 2)
        return index


def test_data_counters_sum_over_workers() -> None:
    counters = DataCounters(workers=2)
    loader = DataLoader(_Counting(counters), batch_size=2, num_workers=2)
    assert torch.cat(list(loader)).tolist() == list(range(8))
    totals = counters.totals()
    assert totals["samples"] == 8
    assert totals["dropped_too_small"] == 8
    assert totals["overflow"] == 4


def test_data_counters_reset() -> None:
    counters = DataCounters(workers=0)
    counters.record(DropCounts(outside=2), overflow=0)
    counters.reset()
    assert set(counters.totals().values()) == {0}
