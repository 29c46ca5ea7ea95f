"""The cross-epoch batch stream: each epoch cut as BatchSampler cuts it, one epoch after another;
its workers asked by position and stopped on demand."""

from __future__ import annotations

from itertools import islice
from multiprocessing import active_children

import pytest
from torch.utils.data import BatchSampler, Dataset

from lucid_yolo.train.data.epoch_batches import BatchStream, EpochBatches
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


class _Indices(Dataset[int]):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, item: tuple[int, int]) -> int:
        return item[1]


def _stream() -> BatchStream:
    sampler = EpochSampler(10, seed=2)
    return BatchStream(_Indices(), sampler, 3, {"num_workers": 2}, drop_last=True)


def _expected(epoch: int) -> list[list[int]]:
    return [[i for _, i in batch] for batch in _cut(EpochSampler(10, seed=2), epoch, True)]


def test_batch_stream_end_stops_its_workers_at_once() -> None:
    stream = _stream()
    before = set(active_children())
    stream.start(0, 0)
    workers = set(active_children()) - before
    assert len(workers) == 2
    stream.end()
    assert [worker.exitcode for worker in workers] == [0, 0]


def test_batch_stream_continues_into_the_next_epoch_where_it_stands() -> None:
    stream = _stream()
    got = [stream.batch(epoch, index).tolist() for epoch in (0, 1) for index in range(3)]
    assert got == _expected(0) + _expected(1)
    assert stream.started == 1


def test_batch_stream_asked_elsewhere_starts_a_new_stream_there() -> None:
    stream = _stream()
    stream.batch(0, 0)
    assert stream.batch(2, 1).tolist() == _expected(2)[1]
    assert stream.started == 2


def test_batch_stream_ended_starts_again_where_it_is_asked() -> None:
    stream = _stream()
    stream.batch(0, 0)
    stream.end()
    assert [stream.batch(0, index).tolist() for index in (1, 2)] == _expected(0)[1:]
    assert stream.started == 2
