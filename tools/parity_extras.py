"""The parity matrix's extra cases: a fit that changes something mid-way (issue 12).

Each extra runs like a matrix case (a native and a replayed fit, compared bitwise by
``tools/parity_matrix.py --extra ...``) with one change a real run meets:

* ``accumulation-changed``: Lightning's ``GradientAccumulationScheduler`` goes from 1 to 2
  micro-batches per step at epoch 1;
* ``empty-batches``: 7 of the 8 training images have empty label files, so some batches hold no
  target at all (every target row is padding; the row counts them, as mosaic may mix in the
  labelled image);
* ``imgsz-changed``: epoch 0 trains at the matrix's size, epoch 1 at 96 px: every region records
  a second signature;
* ``close-mosaic``: mosaic off for the last of two epochs (``close_mosaic=1``).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback, GradientAccumulationScheduler
from torch.utils.data import DataLoader

from lucid_yolo.train import YoloDataModule
from lucid_yolo.train.data.augment.targets import Targets

LATER_IMGSZ = 96
"""``imgsz-changed``: the input size from epoch 1 on (a multiple of the largest stride, 32)."""


class SizeSwitchDataModule(YoloDataModule):
    """Trains at ``imgsz`` in epoch 0 and at ``later_imgsz`` from epoch 1 on.

    Needs ``Trainer(reload_dataloaders_every_n_epochs=1)`` so Lightning asks for the training
    loader again at every epoch.
    """

    def __init__(self, yaml: Path, *, later_imgsz: int, **options: Any) -> None:
        super().__init__(yaml, **options)
        self.later = YoloDataModule(yaml, **{**options, "imgsz": later_imgsz})

    def setup(self, stage: str) -> None:
        super().setup(stage)
        self.later.setup(stage)

    def train_dataloader(self) -> DataLoader[Targets]:
        if self.trainer is not None and self.trainer.current_epoch >= 1:
            self.later.trainer = self.trainer
            return self.later.train_dataloader()
        return super().train_dataloader()


class TargetFreeBatches(Callback):
    """Counts the training batches in which no row is a real target."""

    def __init__(self) -> None:
        self.count = 0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, *_: Any) -> None:
        self.count += int(not bool(batch["valid"].any()))

    def counts(self) -> dict[str, int]:
        """What the case's row reports."""
        return {"target_free_batches": self.count}


@dataclass(frozen=True)
class Extra:
    """One extra case: how its fits differ from a matrix case's.

    Attributes:
        name: the case's name suffix.
        max_steps: optimizer steps (``-1``: run ``max_epochs``).
        max_epochs: epochs, when the change happens at an epoch boundary.
        accumulation: ``GradientAccumulationScheduler`` schedule ``{epoch: micro-batches}``.
        later_imgsz: the input size from epoch 1 on.
        close_mosaic: last epochs without mosaic.
        empty_labels: training images whose label file is emptied.
        trainer: further ``Trainer`` options.
    """

    name: str
    max_steps: int = 6
    max_epochs: int | None = None
    accumulation: dict[int, int] | None = None
    later_imgsz: int | None = None
    close_mosaic: int = 0
    empty_labels: int = 0
    trainer: dict[str, Any] = field(default_factory=dict)

    @property
    def signatures(self) -> int:
        """Signatures every region records (one native warm-up call each)."""
        return 2 if self.later_imgsz is not None else 1

    def prepare(self, yaml: Path, work: Path) -> Path:
        """The dataset of this case: ``yaml`` itself, or a copy with emptied label files."""
        if not self.empty_labels:
            return yaml
        root = work / f"{yaml.parent.name}-{self.name}"
        if not root.exists():
            shutil.copytree(yaml.parent, root)
        for label in sorted((root / "labels" / "train").glob("*.txt"))[: self.empty_labels]:
            label.write_text("")
        copied = root / yaml.name
        # the description names its root: point it at the copy
        copied.write_text(copied.read_text().replace(str(yaml.parent), str(root), 1))
        return copied

    def datamodule(self, yaml: Path, **options: Any) -> YoloDataModule:
        """The data module of both fits."""
        if self.later_imgsz is not None:
            return SizeSwitchDataModule(yaml, later_imgsz=self.later_imgsz, **options)
        return YoloDataModule(yaml, close_mosaic=self.close_mosaic, **options)

    def trainer_options(self, accumulation: int) -> dict[str, Any]:
        """``Trainer`` options replacing the matrix case's steps and accumulation."""
        options: dict[str, Any] = {"max_steps": self.max_steps, **self.trainer}
        if self.max_epochs is not None:
            options["max_epochs"] = self.max_epochs
        if self.later_imgsz is not None:
            options["reload_dataloaders_every_n_epochs"] = 1
        options["accumulate_grad_batches"] = 1 if self.accumulation else accumulation
        return options

    def callbacks(self) -> list[Callback]:
        """Callbacks of both fits; those with a ``counts()`` report into the case's row."""
        callbacks: list[Callback] = [TargetFreeBatches()] if self.empty_labels else []
        if self.accumulation is not None:
            callbacks.append(GradientAccumulationScheduler(scheduling=dict(self.accumulation)))
        return callbacks


EXTRAS = {
    extra.name: extra
    for extra in (
        Extra("accumulation-changed", max_steps=6, accumulation={0: 1, 1: 2}),
        Extra("empty-batches", max_steps=4, empty_labels=7),
        Extra("imgsz-changed", max_steps=6, later_imgsz=LATER_IMGSZ),
        Extra("close-mosaic", max_steps=-1, max_epochs=2, close_mosaic=1),
    )
}
"""The extra cases by name; 8 training images at batch 2 make 4 micro-batches per epoch."""


__all__ = ["EXTRAS", "LATER_IMGSZ", "Extra", "SizeSwitchDataModule", "TargetFreeBatches"]
