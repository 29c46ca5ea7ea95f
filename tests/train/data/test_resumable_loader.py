"""The training loader's position: counted, saved, and skipped to on load."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.fabric.utilities.warnings import PossibleUserWarning
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
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


def _worker_loader(workers: int, rank: int = 0, replicas: int = 1) -> ResumableLoader:
    sampler = EpochSampler(10, seed=3, num_replicas=replicas, rank=rank)
    return ResumableLoader(
        _Indices(),
        batch_size=3,
        sampler=sampler,
        num_workers=workers,
        generator=torch.Generator().manual_seed(5),
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


def test_resumable_loader_iteration_goes_on_after_end_stream_from_a_new_stream() -> None:
    loader = _worker_loader(2)
    loader.epoch_sampler.set_epoch(1)
    iterator = iter(loader)
    seen = [next(iterator).tolist() for _ in range(2)]
    loader.end_stream()
    assert (
        seen + [batch.tolist() for batch in iterator] == _epochs(_worker_loader(0), range(1, 2))[0]
    )
    assert loader.streams == 2


def test_resumable_loader_ended_serves_the_next_epoch_from_a_new_stream() -> None:
    loader = _worker_loader(2)
    _epochs(loader, range(1))
    loader.end_stream()
    assert _epochs(loader, range(1, 2)) == _epochs(_worker_loader(0), range(1, 2))
    assert loader.streams == 2


def test_resumable_loader_started_stream_serves_the_first_iteration() -> None:
    loader = _worker_loader(2)
    loader.start_stream()
    # 2 workers x prefetch_factor 2: the epoch's 4 batches are handed out before any is asked for
    assert loader.dispatched == (0, 3)
    loader.epoch_sampler.set_epoch(0)  # what Lightning does at the epoch start
    assert _batches(loader) == _epochs(_worker_loader(0), range(1))[0]
    assert loader.streams == 1


def test_resumable_loader_start_stream_without_workers_starts_nothing() -> None:
    loader = _worker_loader(0)
    loader.start_stream()
    assert loader.streams == 0
    assert loader.dispatched is None


def test_resumable_loader_started_stream_restarts_where_another_epoch_is_asked() -> None:
    loader = _worker_loader(2)
    loader.start_stream()
    loader.epoch_sampler.set_epoch(2)
    assert _batches(loader) == _epochs(_worker_loader(0), range(2, 3))[0]
    assert loader.streams == 2


def test_resumable_loader_started_stream_begins_at_a_restored_position() -> None:
    loader = _worker_loader(2)
    loader.load_state_dict({"epoch": 4, "batches_done": 2})
    loader.start_stream()
    loader.epoch_sampler.set_epoch(4)
    assert _batches(loader) == _epochs(_worker_loader(0), range(4, 5))[0][2:]
    assert loader.streams == 1


def test_resumable_loader_started_stream_after_an_epoch_end_position_is_the_next_epoch() -> None:
    loader = _worker_loader(2)
    loader.load_state_dict({"epoch": 1, "batches_done": 4})  # a checkpoint at epoch 1's end
    loader.start_stream()
    assert loader.dispatched == (2, 3)
    loader.epoch_sampler.set_epoch(2)
    assert _batches(loader) == _epochs(_worker_loader(0), range(2, 3))[0]
    assert loader.streams == 1


def test_resumable_loader_start_stream_draws_what_the_iteration_would_draw() -> None:
    started, plain = _worker_loader(2), _worker_loader(2)
    global_state = torch.get_rng_state()
    started.start_stream()
    for loader in (started, plain):
        loader.epoch_sampler.set_epoch(0)
        _batches(loader)
    assert torch.equal(torch.get_rng_state(), global_state)
    assert started.generator is not None
    assert plain.generator is not None
    assert torch.equal(started.generator.get_state(), plain.generator.get_state())


@pytest.mark.parametrize("rank", [0, 1])
def test_resumable_loader_started_stream_is_its_ranks_shard(rank: int) -> None:
    loader = _worker_loader(2, rank=rank, replicas=2)
    loader.start_stream()
    loader.epoch_sampler.set_epoch(0)
    assert _batches(loader) == _epochs(_worker_loader(0, rank=rank, replicas=2), range(1))[0]
    assert loader.streams == 1


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


class _ScheduledBatchLog(_BatchLog):
    """Reads the fit's step count while it configures its optimizer, as ``YoloModule``'s
    learning-rate schedule does: Lightning then asks for the training loader before the model
    summary and the sanity check."""

    def configure_optimizers(self) -> Any:
        assert self.trainer.estimated_stepping_batches > 0
        return super().configure_optimizers()


class _StreamCount(Callback):
    """The training loader's streams so far at the sanity check's end, training's start and
    training's end."""

    def __init__(self) -> None:
        self.streams: dict[str, int] = {}

    def on_sanity_check_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._count("sanity check end", trainer)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._count("train start", trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._count("train end", trainer)

    def _count(self, hook: str, trainer: pl.Trainer) -> None:
        loader = trainer.train_dataloader
        self.streams[hook] = loader.streams if isinstance(loader, ResumableLoader) else 0


def _startup_fit(
    data: Path, workers: int, ckpt_path: Path | None = None, **trainer_options: Any
) -> tuple[list[tuple[list[int], float]], dict[str, int]]:
    """A 2-epoch fit of 4 steps an epoch with a sanity check: the trained batches and the
    training loader's streams at its hooks."""
    pl.seed_everything(0, verbose=False)
    module = _ScheduledBatchLog()
    count = _StreamCount()
    callbacks = [count, *trainer_options.pop("callbacks", [])]
    trainer = quiet_cpu_trainer(
        max_epochs=2, num_sanity_val_steps=1, callbacks=callbacks, **trainer_options
    )
    datamodule = YoloDataModule(
        data, imgsz=64, batch_size=2, val_batch_size=2, workers=workers, seed=0
    )
    trainer.fit(module, datamodule, ckpt_path=ckpt_path)
    return module.seen, count.streams


def _start_at_first_batch(self: ResumableLoader) -> None:
    """``start_stream`` undone: the stream starts when Lightning asks for the first batch."""


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_resumable_loader_in_a_fit_starts_its_stream_before_the_sanity_check_ends(
    tiny_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tiny_dataset("detect")
    early, streams = _startup_fit(data, workers=2)
    assert streams == {"sanity check end": 1, "train start": 1, "train end": 1}
    assert len(early) == 2 * 4
    assert early == _startup_fit(data, workers=0)[0]
    monkeypatch.setattr(ResumableLoader, "start_stream", _start_at_first_batch)
    late, late_streams = _startup_fit(data, workers=2)
    assert late_streams == {"sanity check end": 0, "train start": 0, "train end": 1}
    assert early == late


def _checkpoints(root: Path) -> list[Callback]:
    """Checkpoints every 3 steps (``step=6.ckpt``: 2 batches into epoch 1) and after each
    epoch's validation (``epoch=0.ckpt``)."""
    return [
        ModelCheckpoint(root, filename="{step}", every_n_train_steps=3, save_top_k=-1),
        ModelCheckpoint(root, filename="{epoch}", save_top_k=-1),
    ]


@pytest.fixture(scope="module")
def uninterrupted_fit(
    tiny_dataset: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Any, Path]:
    """The batches of a 2-worker fit and the folder of its checkpoints, run once: each resume
    case below starts from one of them and writes its own into the same folder (versioned
    names), as a resumed `lucid-yolo fit` does."""
    root = tmp_path_factory.mktemp("uninterrupted")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PossibleUserWarning)
        full, _ = _startup_fit(
            tiny_dataset("detect"), 2, callbacks=_checkpoints(root), enable_checkpointing=True
        )
    return full, root


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
# the resumed fit writes into the folder of the fit it resumes, as a resumed `lucid-yolo fit` does
@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty:UserWarning")
@pytest.mark.parametrize(("checkpoint", "steps_before"), [("step=6", 6), ("epoch=0", 4)])
def test_resumable_loader_in_a_resumed_fit_starts_its_stream_once_where_it_resumes(
    tiny_dataset: Any,
    uninterrupted_fit: tuple[Any, Path],
    checkpoint: str,
    steps_before: int,
) -> None:
    full, folder = uninterrupted_fit
    resumed, streams = _startup_fit(
        tiny_dataset("detect"),
        2,
        ckpt_path=folder / f"{checkpoint}.ckpt",
        callbacks=_checkpoints(folder),  # the same folder, so their states load as saved
        enable_checkpointing=True,
    )
    assert resumed == full[steps_before:]
    # one stream, started before training (and before the sanity check where one runs: Lightning
    # runs it on a resume from a checkpoint written after a validation)
    assert streams["train start"] == streams["train end"] == 1
    assert set(streams.values()) == {1}


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_resumable_loader_built_again_at_a_later_epoch_starts_its_stream_when_iterated(
    tiny_dataset: Any,
) -> None:
    data = tiny_dataset("detect")
    seen, streams = _startup_fit(data, 2, reload_dataloaders_every_n_epochs=1)
    # epoch 1's loader, new at epoch 0: a stream started when it was built would start again
    assert streams["train end"] == 1
    assert seen == _startup_fit(data, 0)[0]
