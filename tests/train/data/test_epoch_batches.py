"""The cross-epoch batch stream: each epoch cut as BatchSampler cuts it, one epoch after another."""

from __future__ import annotations

from itertools import islice

import pytest
from torch.utils.data import BatchSampler

from lucid_yolo.train.data.epoch_batches import EpochBatches
from lucid_yolo.train.data.sampler import EpochSampler


def _cut(sampler: EpochSampler, epoch: int, drop_last: bool) -> list[list[tuple[int, int]]]:
    sampler.set_epoch(epoch)
    return list(BatchSampler(sampler, batch_size=3, drop_last=drop_last))


@pytest.mark.parametrize("drop_last", [True, False])
def test_epoch_batches_run_on_into_the_next_epochs(drop_last: bool) -> None:
    sampler = EpochSampler(10, seed=2)
    stream = EpochBatches(sampler, 3, drop_last=drop_last, epoch=5, first=0)
    per_epoch = stream.batches_per_epoch
    assert per_epoch == (3 if drop_last else 4)
    expected = [b for e in (5, 6, 7) for b in _cut(EpochSampler(10, seed=2), e, drop_last)]
    assert list(islice(stream, 3 * per_epoch)) == expected
    assert stream.dispatched == (7, per_epoch - 1)


def test_epoch_batches_start_at_the_given_batch() -> None:
    stream = EpochBatches(EpochSampler(10, seed=2), 3, drop_last=True, epoch=1, first=2)
    expected = _cut(EpochSampler(10, seed=2), 1, True)[2:] + _cut(EpochSampler(10, seed=2), 2, True)
    assert list(islice(stream, 4)) == expected


def test_epoch_batches_refuse_an_epoch_without_a_batch() -> None:
    with pytest.raises(ValueError, match="holds no batch of 4 with drop_last=True"):
        EpochBatches(EpochSampler(3), 4, drop_last=True, epoch=0, first=0)


def test_epoch_batches_refuse_a_first_batch_past_the_epoch() -> None:
    with pytest.raises(ValueError, match=r"first=4 must be in \[0, 3\]"):
        EpochBatches(EpochSampler(10), 3, drop_last=True, epoch=0, first=4)
