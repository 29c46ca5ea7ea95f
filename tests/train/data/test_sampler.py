"""EpochSampler: epoch travels with the index, order per epoch, one shard per rank."""

from __future__ import annotations

import pytest

from lucid_yolo.train.data.sampler import EpochSampler


def _indices(sampler: EpochSampler) -> list[int]:
    return [i for _, i in sampler]


def test_epoch_sampler_yields_epoch_with_index() -> None:
    sampler = EpochSampler(4, shuffle=False)
    sampler.set_epoch(3)
    assert list(sampler) == [(3, 0), (3, 1), (3, 2), (3, 3)]


def test_epoch_sampler_shuffles_per_epoch_reproducibly() -> None:
    sampler = EpochSampler(50, seed=1)
    first = _indices(sampler)
    assert sorted(first) == list(range(50))
    assert first == _indices(EpochSampler(50, seed=1))
    sampler.set_epoch(1)
    assert _indices(sampler) != first


def test_epoch_sampler_repeats_the_epoch_until_a_new_one_is_set() -> None:
    sampler = EpochSampler(2, shuffle=False)
    sampler.set_epoch(7)
    assert list(sampler) == [(7, 0), (7, 1)]
    assert list(sampler) == [(7, 0), (7, 1)]


@pytest.mark.parametrize("length", [12, 13])
def test_epoch_sampler_training_shards_are_disjoint_equal_and_cut_from_the_epoch(
    length: int,
) -> None:
    whole = EpochSampler(length, seed=4)
    whole.set_epoch(5)
    order = _indices(whole)
    shards = []
    for rank in range(3):
        sampler = EpochSampler(length, seed=4, num_replicas=3, rank=rank)
        sampler.set_epoch(5)
        shards.append(_indices(sampler))
        assert len(sampler) == length // 3
    assert [len(s) for s in shards] == [length // 3] * 3
    assert sorted(i for shard in shards for i in shard) == sorted(order[: length - length % 3])


def test_epoch_sampler_training_shard_order_follows_seed_and_epoch() -> None:
    def shard(seed: int, epoch: int) -> list[int]:
        sampler = EpochSampler(40, seed=seed, num_replicas=2, rank=1)
        sampler.set_epoch(epoch)
        return _indices(sampler)

    assert shard(3, 2) == shard(3, 2)
    assert shard(3, 2) != shard(3, 3)
    assert shard(3, 2) != shard(4, 2)


def test_epoch_sampler_evaluation_shards_hold_every_image_once() -> None:
    shards = [
        _indices(EpochSampler(7, shuffle=False, num_replicas=3, rank=r, equal_shards=False))
        for r in range(3)
    ]
    assert shards == [[0, 3, 6], [1, 4], [2, 5]]


def test_epoch_sampler_resume_skips_the_trained_part_of_this_ranks_shard() -> None:
    sampler = EpochSampler(20, seed=2, num_replicas=2, rank=1)
    sampler.set_epoch(3)
    shard = _indices(sampler)
    sampler.resume_at(3, 4)
    assert _indices(sampler) == shard[4:]


def test_epoch_sampler_resume_at_the_end_of_an_epoch_leaves_the_next_epoch_whole() -> None:
    # a checkpoint written at an epoch's end: the resumed fit's next epoch skipped everything
    sampler = EpochSampler(8, seed=2)
    sampler.resume_at(0, 8)
    sampler.set_epoch(1)
    assert len(_indices(sampler)) == 8


def test_epoch_sampler_resume_position_kept_when_its_epoch_is_set_again() -> None:
    sampler = EpochSampler(8, seed=2)
    sampler.set_epoch(1)
    shard = _indices(sampler)
    sampler.resume_at(1, 3)
    sampler.set_epoch(1)
    assert _indices(sampler) == shard[3:]


def test_epoch_sampler_resume_at_rejects_a_start_past_the_shard() -> None:
    with pytest.raises(ValueError, match=r"start=6 must be in \[0, 5\]"):
        EpochSampler(10, num_replicas=2, rank=0).resume_at(0, 6)


def test_epoch_sampler_rejects_a_rank_outside_the_replicas() -> None:
    with pytest.raises(ValueError, match="Invalid rank 2"):
        EpochSampler(10, num_replicas=2, rank=2)
