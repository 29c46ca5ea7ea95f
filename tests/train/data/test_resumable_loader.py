"""The training loader's position: counted, saved, and skipped to on load."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader, Dataset

from lucid_yolo.train.data.resumable_loader import ResumableLoader
from lucid_yolo.train.data.sampler import EpochSampler


class _Indices(Dataset[int]):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, item: tuple[int, int]) -> int:
        return item[1]


def _loader() -> ResumableLoader:
    return ResumableLoader(_Indices(), batch_size=2, sampler=EpochSampler(10, seed=3))


def _batches(loader: DataLoader[int]) -> list[list[int]]:
    return [batch.tolist() for batch in loader]


def test_resumable_loader_resumes_mid_epoch_with_the_same_batches() -> None:
    first = _loader()
    first.epoch_sampler.set_epoch(4)
    iterator = iter(first)
    seen = [next(iterator).tolist() for _ in range(3)]
    state = first.state_dict()
    assert state == {"epoch": 4, "batches_done": 3}
    rest = [batch.tolist() for batch in iterator]
    resumed = _loader()
    resumed.load_state_dict(state)
    resumed.epoch_sampler.set_epoch(4)  # what Lightning does at the epoch start
    assert _batches(resumed) == rest
    assert seen + rest == _batches(_loader_at(4))
    assert resumed.state_dict() == {"epoch": 4, "batches_done": 5}


def _loader_at(epoch: int) -> ResumableLoader:
    loader = _loader()
    loader.epoch_sampler.set_epoch(epoch)
    return loader


def test_resumable_loader_next_epoch_starts_from_the_first_batch() -> None:
    loader = _loader()
    loader.load_state_dict({"epoch": 1, "batches_done": 4})
    assert len(_batches(loader)) == 1
    loader.epoch_sampler.set_epoch(2)
    assert len(_batches(loader)) == 5


def test_resumable_loader_needs_epoch_sampler() -> None:
    with pytest.raises(TypeError, match="needs an EpochSampler"):
        ResumableLoader(_Indices(), batch_size=2, sampler=range(10))  # type: ignore[arg-type]


def test_epoch_sampler_resume_at_rejects_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"start=11 must be in \[0, 10\] \(this rank"):
        EpochSampler(10).resume_at(0, 11)


def test_epoch_sampler_resume_at_skips_the_order_prefix() -> None:
    sampler = EpochSampler(6, seed=1)
    sampler.set_epoch(2)
    order = list(sampler)
    sampler.resume_at(2, 4)
    assert list(sampler) == order[4:]
    sampler.set_epoch(2)
    assert list(sampler) == order
