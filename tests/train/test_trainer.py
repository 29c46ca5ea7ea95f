"""YoloTrainer writes the checkpoints of one moment of a fit from one dump."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from lucid_yolo.train import YoloTrainer
from lucid_yolo.train.callbacks import AtomicCheckpointIO, BackgroundCheckpointWrites
from lucid_yolo.train.checkpoint_snapshot import same_content

STEPS_PER_EPOCH = 4


class _Regression(pl.LightningModule):
    """A linear fit whose validation ``score`` improves every epoch; counts its dumps."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.dumps: list[int] = []

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        inputs, targets = batch
        return nn.functional.mse_loss(self.layer(inputs), targets)

    def validation_step(self, batch: list[Tensor], batch_idx: int) -> None:
        self.log("score", float(self.current_epoch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.dumps.append(self.global_step)

    def train_dataloader(self) -> DataLoader[tuple[Tensor, ...]]:
        return self._loader()

    def val_dataloader(self) -> DataLoader[tuple[Tensor, ...]]:
        return self._loader()

    @staticmethod
    def _loader() -> DataLoader[tuple[Tensor, ...]]:
        inputs = torch.linspace(-1, 1, STEPS_PER_EPOCH * 8).reshape(-1, 4)
        return DataLoader(TensorDataset(inputs, inputs.sum(1, keepdim=True)), batch_size=2)


def _fit(
    trainer_class: type[pl.Trainer],
    folder: Path,
    epochs: int,
    *callbacks: pl.Callback,
) -> _Regression:
    """A CPU fit keeping ``best`` and ``last`` as ``lucid-yolo fit`` does, written in the
    background, into ``folder``."""
    pl.seed_everything(0, verbose=False)
    model = _Regression()
    trainer = trainer_class(
        accelerator="cpu",
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        plugins=[AtomicCheckpointIO()],
        callbacks=[
            ModelCheckpoint(folder, monitor="score", mode="max", filename="best"),
            ModelCheckpoint(folder, filename="last", enable_version_counter=False),
            BackgroundCheckpointWrites(),
            *callbacks,
        ],
    )
    trainer.fit(model)
    return model


def test_yolo_trainer_dumps_once_for_best_and_last_of_an_epochs_end(tmp_path: Path) -> None:
    model = _fit(YoloTrainer, tmp_path, epochs=3)
    assert model.dumps == [4, 8, 12]  # one per epoch, not one per file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.ckpt", "last.ckpt"]


def test_lightnings_trainer_dumps_once_per_file(tmp_path: Path) -> None:
    model = _fit(pl.Trainer, tmp_path, epochs=2)
    assert model.dumps == [4, 4, 8, 8]  # what YoloTrainer saves


@pytest.mark.parametrize("epochs", [1, 2])
def test_yolo_trainer_writes_what_a_dump_per_file_writes(tmp_path: Path, epochs: int) -> None:
    folder = tmp_path / "checkpoints"
    _fit(pl.Trainer, folder, epochs)
    expected = {name: torch.load(folder / name) for name in ("best.ckpt", "last.ckpt")}
    shutil.rmtree(folder)
    _fit(YoloTrainer, folder, epochs)
    for name, checkpoint in expected.items():
        assert same_content(torch.load(folder / name), checkpoint), name


def test_yolo_trainer_links_best_and_last_when_they_hold_the_same(tmp_path: Path) -> None:
    _fit(YoloTrainer, tmp_path, epochs=2)
    # the second epoch's files: the same content, one file
    assert (tmp_path / "best.ckpt").samefile(tmp_path / "last.ckpt")


def test_yolo_trainer_writes_the_first_epochs_best_and_last_apart(tmp_path: Path) -> None:
    _fit(YoloTrainer, tmp_path, epochs=1)
    best, last = torch.load(tmp_path / "best.ckpt"), torch.load(tmp_path / "last.ckpt")
    # the last-file callback records its file only when it first writes it: after best.ckpt
    last_state = "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0, "
    last_state += "'every_n_epochs': 1, 'train_time_interval': None}"
    assert best["callbacks"][last_state]["best_model_path"] == ""
    assert last["callbacks"][last_state]["best_model_path"] == str(tmp_path / "last.ckpt")
    assert not (tmp_path / "best.ckpt").samefile(tmp_path / "last.ckpt")
    assert same_content(best["state_dict"], last["state_dict"])


def test_yolo_trainer_dumps_again_after_a_validation_at_the_same_step(tmp_path: Path) -> None:
    every_epochs_last_step = ModelCheckpoint(
        tmp_path / "steps", filename="{step}", every_n_train_steps=STEPS_PER_EPOCH
    )
    model = _fit(YoloTrainer, tmp_path, 1, every_epochs_last_step)
    # step 4's save before validation, then best and last after it (one dump)
    assert model.dumps == [4, 4]


def test_yolo_trainer_dumps_every_save_after_the_fit(tmp_path: Path) -> None:
    trainer = YoloTrainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[AtomicCheckpointIO()],
    )
    model = _Regression()
    trainer.fit(model)
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    with torch.no_grad():
        model.layer.weight.zero_()  # between two saves of the same step
    trainer.save_checkpoint(tmp_path / "b.ckpt")
    assert model.dumps == [4, 4]
    assert torch.load(tmp_path / "b.ckpt")["state_dict"]["layer.weight"].abs().sum() == 0
