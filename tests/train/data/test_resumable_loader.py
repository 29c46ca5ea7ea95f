"""The training loader's position: counted, saved, and skipped to on load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from quiet_trainer import quiet_cpu_trainer
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from lucid_yolo.train.data.datamodule import YoloDataModule
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


def _worker_loader(workers: int) -> ResumableLoader:
    return ResumableLoader(
        _Indices(), batch_size=3, sampler=EpochSampler(10, seed=3), num_workers=workers
    )


def _epochs(loader: ResumableLoader, epochs: range) -> list[list[list[int]]]:
    seen = []
    for epoch in epochs:
        loader.epoch_sampler.set_epoch(epoch)
        seen.append(_batches(loader))
    return seen


def test_resumable_loader_with_workers_yields_the_batches_of_one_process() -> None:
    assert _epochs(_worker_loader(2), range(3)) == _epochs(_worker_loader(0), range(3))


def test_resumable_loader_with_workers_loads_the_next_epoch_before_this_one_ends() -> None:
    loader = _worker_loader(2)
    loader.epoch_sampler.set_epoch(0)
    assert len(_batches(loader)) == 4
    # 2 workers x prefetch_factor 2: up to 4 batches handed out ahead of the last one received
    assert loader.dispatched is not None
    assert loader.dispatched[0] == 1


def test_resumable_loader_with_workers_resumes_mid_epoch_with_the_same_batches() -> None:
    first = _worker_loader(2)
    first.epoch_sampler.set_epoch(4)
    iterator = iter(first)
    seen = [next(iterator).tolist() for _ in range(2)]
    state = first.state_dict()
    resumed = _worker_loader(2)
    resumed.load_state_dict(state)
    resumed.epoch_sampler.set_epoch(4)
    assert seen + _batches(resumed) == _epochs(_worker_loader(0), range(4, 5))[0]


def test_resumable_loader_with_workers_after_an_epoch_left_early() -> None:
    loader = _worker_loader(2)
    loader.epoch_sampler.set_epoch(0)
    next(iter(loader))
    loader.epoch_sampler.set_epoch(1)
    assert _batches(loader) == _epochs(_worker_loader(0), range(1, 2))[0]


class _BatchLog(pl.LightningModule):
    """Trains nothing of note; records each training batch's image ids and pixel sum."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))
        self.seen: list[tuple[list[int], float]] = []

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        images = batch["images"].float()
        self.seen.append((batch["image_ids"].tolist(), float(images.sum())))
        return self.weight * images.mean()

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.log("val/mean", batch["images"].float().mean())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit_batches(data: Path, workers: int) -> list[tuple[list[int], float]]:
    pl.seed_everything(0, verbose=False)
    module = _BatchLog()
    trainer = quiet_cpu_trainer(max_epochs=3, num_sanity_val_steps=0)
    datamodule = YoloDataModule(data, imgsz=64, batch_size=3, workers=workers, seed=0)
    trainer.fit(module, datamodule)
    return module.seen


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_resumable_loader_in_a_fit_with_workers_trains_on_the_batches_of_one_process(
    tiny_dataset: Any,
) -> None:
    data = tiny_dataset("detect")
    streamed = _fit_batches(data, workers=2)
    assert len(streamed) == 3 * 2
    assert streamed == _fit_batches(data, workers=0)
