"""The validation loader: every pass the same batches, the next pass loading before it starts."""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from quiet_trainer import quiet_cpu_trainer
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from lucid_yolo.train.data.datamodule import YoloDataModule
from lucid_yolo.train.data.repeating_loader import RepeatingLoader
from lucid_yolo.train.data.sampler import EpochSampler


class _Indices(Dataset[int]):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, item: tuple[int, int]) -> int:
        return item[1]


def _sampler() -> EpochSampler:
    return EpochSampler(10, shuffle=False, equal_shards=False)


def _loader(workers: int) -> RepeatingLoader:
    return RepeatingLoader(_Indices(), batch_size=3, sampler=_sampler(), num_workers=workers)


def _batches(loader: DataLoader[int]) -> list[list[int]]:
    return [batch.tolist() for batch in loader]


ONE_PASS = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_repeating_loader_with_workers_gives_every_pass_the_same_batches_from_one_stream() -> None:
    loader = _loader(2)
    passes = [_batches(loader) for _ in range(3)]
    assert passes == [ONE_PASS] * 3
    assert loader.streams == 1


def test_repeating_loader_counts_a_pass_ended_when_its_last_batch_is_handed_out() -> None:
    loader = _loader(2)
    # as Lightning's evaluation loop: stop at the loader's length, never ask past it
    passes = [[batch.tolist() for batch in islice(loader, len(loader))] for _ in range(3)]
    assert passes == [ONE_PASS] * 3
    assert loader.streams == 1


def test_repeating_loader_after_a_pass_left_one_batch_short_starts_a_new_stream() -> None:
    loader = _loader(2)
    assert [batch.tolist() for batch in islice(loader, len(loader) - 1)] == ONE_PASS[:-1]
    assert _batches(loader) == ONE_PASS
    assert loader.streams == 2


def test_repeating_loader_with_workers_loads_the_next_pass_when_this_one_is_handed_out() -> None:
    loader = _loader(2)
    assert _batches(loader) == ONE_PASS
    # 2 workers x prefetch_factor 2: batches of the next pass were handed out with this one
    assert loader.dispatched is not None
    assert loader.dispatched[0] == 1


def test_repeating_loader_after_a_pass_left_early_starts_a_new_stream_at_a_pass_start() -> None:
    loader = _loader(2)
    assert next(iter(loader)).tolist() == ONE_PASS[0]  # a sanity check's single batch
    assert _batches(loader) == ONE_PASS
    assert loader.streams == 2


def test_repeating_loader_ended_gives_the_next_pass_from_a_new_stream() -> None:
    loader = _loader(2)
    assert _batches(loader) == ONE_PASS
    loader.end_stream()
    assert _batches(loader) == ONE_PASS
    assert loader.streams == 2


def test_repeating_loader_without_workers_is_a_plain_loader() -> None:
    loader = _loader(0)
    assert [_batches(loader) for _ in range(2)] == [ONE_PASS] * 2
    assert loader.streams == 0
    assert loader.dispatched is None


def test_repeating_loader_refuses_a_shuffling_sampler() -> None:
    with pytest.raises(TypeError, match="does not shuffle, got EpochSampler that shuffles"):
        RepeatingLoader(_Indices(), batch_size=3, sampler=EpochSampler(10, shuffle=True))


def test_repeating_loader_refuses_another_sampler() -> None:
    with pytest.raises(TypeError, match="does not shuffle, got SequentialSampler"):
        RepeatingLoader(_Indices(), batch_size=3)


def test_repeating_loader_refuses_a_loader_without_batch_size() -> None:
    with pytest.raises(TypeError, match="needs a batch size"):
        RepeatingLoader(_Indices(), batch_size=None, sampler=_sampler())


def test_datamodule_repeats_the_validation_loader_only(tiny_dataset: Any) -> None:
    data = YoloDataModule(tiny_dataset("detect"), imgsz=64, batch_size=2, workers=0)
    data.setup("fit")
    assert isinstance(data.val_dataloader(), RepeatingLoader)
    assert not isinstance(data.train_dataloader(), RepeatingLoader)


class _ValidationLog(pl.LightningModule):
    """Trains nothing of note; records each validation batch's image ids and pixel sum."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))
        self.validated: list[tuple[list[int], float]] = []

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self.weight * batch["images"].float().mean()

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.validated.append((batch["image_ids"].tolist(), float(batch["images"].float().sum())))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _validated(data: Path, workers: int) -> tuple[list[tuple[list[int], float]], int]:
    """The validated batches of a 3-epoch fit and the streams its validation loader started."""
    module = _ValidationLog()
    trainer = quiet_cpu_trainer(max_epochs=3, num_sanity_val_steps=1)
    datamodule = YoloDataModule(
        data, imgsz=64, batch_size=2, val_batch_size=1, workers=workers, seed=0
    )
    trainer.fit(module, datamodule)
    loader = trainer.val_dataloaders
    assert isinstance(loader, RepeatingLoader)
    return module.validated, loader.streams


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_repeating_loader_in_a_fit_with_workers_validates_the_batches_of_one_process(
    tiny_dataset: Any,
) -> None:
    data = tiny_dataset("detect")
    streamed, streams = _validated(data, workers=2)
    assert streamed == _validated(data, workers=0)[0]
    assert streams == 2  # the sanity check's pass left early, then one stream for every pass
    per_pass = (len(streamed) - 1) // 3  # after the sanity check's one batch, three passes
    assert per_pass >= 2
    assert len(streamed) == 1 + 3 * per_pass
    first, second, third = (streamed[1 + k * per_pass : 1 + (k + 1) * per_pass] for k in range(3))
    assert first == second == third
