"""YoloDataModule ends its loaders' worker streams when a fit ends, returned or failed."""

from __future__ import annotations

from multiprocessing import active_children
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from quiet_trainer import quiet_cpu_trainer
from torch import Tensor, nn

from lucid_yolo.train.data.datamodule import YoloDataModule

pytestmark = pytest.mark.filterwarnings(
    "ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"
)


class _Workers(Callback):
    """The child processes that were not running when it was built and ran at a training
    step: the fit's loader workers."""

    def __init__(self) -> None:
        self._before = set(active_children())
        self.seen: set[BaseProcess] = set()

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.seen.update(set(active_children()) - self._before)


class _ImageSums(pl.LightningModule):
    """Trains nothing of note; records each training batch's pixel sum, and fails the step
    ``fail_at`` when given."""

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))
        self.fail_at = fail_at
        self.sums: list[float] = []

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        if batch_idx == self.fail_at:
            raise RuntimeError(f"step {batch_idx} fails")
        images = batch["images"].float()
        self.sums.append(float(images.sum()))
        return self.weight * images.mean()

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.log("val/mean", batch["images"].float().mean())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _datamodule(data: Path) -> YoloDataModule:
    return YoloDataModule(data, imgsz=64, batch_size=2, val_batch_size=2, workers=2, seed=0)


def _fit(datamodule: YoloDataModule, module: _ImageSums) -> set[BaseProcess]:
    """A 2-epoch fit with a sanity check; the loader workers it ran."""
    workers = _Workers()
    trainer = quiet_cpu_trainer(max_epochs=2, num_sanity_val_steps=1, callbacks=[workers])
    trainer.fit(module, datamodule)
    return workers.seen


def _exit_codes(processes: set[BaseProcess]) -> list[int | None]:
    """Each process's exit code: ``None`` while it runs (a torch worker reports 0 whether it
    stopped of itself or its parent terminated it)."""
    return [process.exitcode for process in processes]


def test_datamodule_fit_leaves_no_loader_worker_alive(tiny_dataset: Any) -> None:
    workers = _fit(_datamodule(tiny_dataset("detect")), _ImageSums())
    # 2 training workers, 2 validation workers of the sanity check's pass (left early), then 2
    # of the validation stream
    assert _exit_codes(workers) == [0] * 6


def test_datamodule_failed_fit_leaves_no_loader_worker_alive(tiny_dataset: Any) -> None:
    workers = _Workers()
    trainer = quiet_cpu_trainer(max_epochs=2, num_sanity_val_steps=1, callbacks=[workers])
    with pytest.raises(RuntimeError, match="step 1 fails"):
        trainer.fit(_ImageSums(fail_at=1), _datamodule(tiny_dataset("detect")))
    assert _exit_codes(workers.seen) == [0] * 4  # the training's and the sanity check's


def test_datamodule_fitted_again_trains_on_the_same_batches(tiny_dataset: Any) -> None:
    datamodule = _datamodule(tiny_dataset("detect"))
    first, second = _ImageSums(), _ImageSums()
    _fit(datamodule, first)
    workers = _fit(datamodule, second)
    assert len(first.sums) == 2 * 4
    assert second.sums == first.sums
    assert _exit_codes(workers) == [0] * 6
