"""EpochSampler: epoch travels with the index, order per epoch."""

from __future__ import annotations

from lucid_yolo.train.data.sampler import EpochSampler


def test_epoch_sampler_yields_epoch_with_index() -> None:
    sampler = EpochSampler(4, shuffle=False)
    sampler.set_epoch(3)
    assert list(sampler) == [(3, 0), (3, 1), (3, 2), (3, 3)]


def test_epoch_sampler_shuffles_per_epoch_reproducibly() -> None:
    sampler = EpochSampler(50, seed=1)
    first = [i for _, i in sampler]
    assert sorted(first) == list(range(50))
    assert first == [i for _, i in EpochSampler(50, seed=1)]
    sampler.set_epoch(1)
    assert [i for _, i in sampler] != first
