"""The callback that writes ``lucid-yolo predict``'s outputs: a JSON record (and a PNG) per image.

LightningCLI adds it under ``--output.*`` to every subcommand; it only acts in ``predict``, where
:meth:`YoloModule.predict_step` hands it each batch's per-image predictions in source pixels
(format in :mod:`lucid_yolo.cli.prediction_output`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import BasePredictionWriter
from torch import Tensor
from typing_extensions import override

from lucid_yolo.cli.errors import CliError
from lucid_yolo.cli.prediction_output import detections, draw, record
from lucid_yolo.train import YoloDataModule, YoloModule
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.data.image_file import read_image, write_image


class PredictionWriter(BasePredictionWriter):
    """Write ``DIR/<image stem>.json`` per predicted image, and ``DIR/<image stem>.png`` overlays.

    Args:
        dir: output folder; ``None``: the run's folder (``trainer.log_dir``, e.g.
            ``runs/detect/predict1``), next to its ``config.yaml``.
        draw: also write the image with its predictions drawn (PNG, source resolution).

    Raises:
        CliError: at ``setup`` of a prediction, when the trainer has no :class:`YoloDataModule`
            and :class:`YoloModule` (the file names come from the data module's images).

    Notes:
        ``write_on_batch_end`` fires after each ``predict_step``; :meth:`summary` then reads
        ``predicted N image(s), M detection(s): DIR``, which ``lucid-yolo predict`` prints once
        the progress bar is gone.
    """

    def __init__(self, dir: str | Path | None = None, draw: bool = False) -> None:
        super().__init__(write_interval="batch")
        self.dir = None if dir is None else Path(dir)
        self.draw = draw
        self.out = Path()
        self.images = 0
        self.detections = 0

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "predict":
            return
        data = _datamodule(trainer)
        if not isinstance(data, YoloDataModule) or not isinstance(pl_module, YoloModule):
            raise CliError(
                "the prediction writer needs a YoloModule and a YoloDataModule (it names the "
                f"outputs after the data module's images), got {type(pl_module).__name__} and "
                f"{type(data).__name__}"
            )
        self.out = self.dir or Path(trainer.log_dir or trainer.default_root_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.images = self.detections = 0

    @override
    def write_on_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        prediction: Any,
        batch_indices: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        data = _datamodule(trainer)
        assert isinstance(pl_module, YoloModule)
        assert isinstance(data, YoloDataModule)
        self._write(data, pl_module.names, prediction, batch)

    def summary(self) -> str:
        """``predicted N image(s), M detection(s): DIR`` for the last prediction run."""
        return f"predicted {self.images} image(s), {self.detections} detection(s): {self.out}"

    def _write(
        self,
        data: YoloDataModule,
        names: tuple[str, ...],
        per_image: list[dict[str, Tensor]],
        batch: Batch,
    ) -> None:
        for predictions, size in zip(per_image, batch["orig_sizes"], strict=True):
            path = data.predict_image(int(predictions["image_id"]))
            height, width = (int(v) for v in size)
            found = detections(predictions, names)
            document = record(path, (height, width), found)
            (self.out / f"{path.stem}.json").write_text(json.dumps(document) + "\n", "utf-8")
            if self.draw:
                overlay = draw(read_image(path), predictions, names)
                write_image(self.out / f"{path.stem}.png", overlay)
            self.images += 1
            self.detections += len(found)


def _datamodule(trainer: pl.Trainer) -> object:
    # set by the trainer's data connector at run time, absent from the class annotations
    return getattr(trainer, "datamodule", None)


__all__ = ["PredictionWriter"]
