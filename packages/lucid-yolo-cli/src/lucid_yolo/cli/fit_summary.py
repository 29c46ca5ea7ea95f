"""The model summary at the start of ``fit``: parameters and GFLOPs counted by lucid-yolo.

Lightning's own summary counts FLOPs only for a module that sets ``example_input_array`` and
otherwise prints ``Total FLOPs: 0``; it also lists the EMA copy and the loss as if they were part
of the model. This callback takes the summary's place (Lightning adds its own only when no
:class:`~lightning.pytorch.callbacks.ModelSummary` is given) and prints the counts of
:func:`lucid_yolo.models.model_summary` at the run's input size, the numbers ``lucid-yolo info``
shows.
"""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelSummary
from lightning.pytorch.utilities import rank_zero_only
from typing_extensions import override

from lucid_yolo.models import model_summary
from lucid_yolo.train import YoloDataModule, YoloModule


class FitModelSummary(ModelSummary):
    """Print ``<model>: <task>, <classes> classes`` and the training and inference totals.

    Fires in ``on_fit_start``, before the first sanity-check or training batch. Off with
    ``--trainer.enable_model_summary false``.
    """

    @override
    @rank_zero_only
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        data = getattr(trainer, "datamodule", None)
        if not isinstance(pl_module, YoloModule) or not isinstance(data, YoloDataModule):
            return
        name = str(pl_module.hparams["model"])
        print(f"{name}: {pl_module.task}, {pl_module.net.num_classes} classes", flush=True)
        for line in model_summary(pl_module.net, data.imgsz).totals():
            print(line, flush=True)


__all__ = ["FitModelSummary"]
