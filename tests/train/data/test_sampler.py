"""EpochSampler: epoch travels with the index, order per epoch."""

from __future__ import annotations

from lightning.fabric.utilities.distributed import DistributedSamplerWrapper

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


def test_epoch_sampler_advances_when_no_epoch_is_set() -> None:
    sampler = EpochSampler(2, shuffle=False)
    assert list(sampler) == [(0, 0), (0, 1)]
    assert list(sampler) == [(1, 0), (1, 1)]
    sampler.set_epoch(7)
    assert list(sampler) == [(7, 0), (7, 1)]
    assert list(sampler) == [(8, 0), (8, 1)]


def test_epoch_sampler_epoch_changes_under_lightning_ddp_wrapper() -> None:
    wrapper = DistributedSamplerWrapper(EpochSampler(8), num_replicas=2, rank=0, shuffle=False)
    epochs = []
    for epoch in range(3):
        wrapper.set_epoch(epoch)
        epochs.append({e for e, _ in wrapper})
    assert epochs == [{0}, {1}, {2}]
