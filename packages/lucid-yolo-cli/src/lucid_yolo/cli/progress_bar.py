"""The progress bar of a CLI run: Lightning's rich bar without the logger's version number.

Lightning shows the logger's version beside the step metrics (``v_num: fit1``). A lucid-yolo run's
version is its run folder, which the run's first line already names, so the column only repeats
it in Lightning's words (issue 18, point 7: each line a user reads should be ours).
"""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import RichProgressBar
from typing_extensions import override


class RunProgressBar(RichProgressBar):
    """:class:`~lightning.pytorch.callbacks.RichProgressBar` minus the ``v_num`` column."""

    @override
    def get_metrics(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule
    ) -> dict[str, int | str | float | dict[str, float]]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics


__all__ = ["RunProgressBar"]
