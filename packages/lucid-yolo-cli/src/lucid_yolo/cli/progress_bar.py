"""The progress bar of a CLI run: Lightning's rich bar, without the logger's version number, and
without making the host wait for the GPU after every step.

Lightning shows the logger's version beside the step metrics (``v_num: fit1``). A lucid-yolo run's
version is its run folder, which the run's first line already names, so the column only repeats
it in Lightning's words (issue 18, point 7: each line a user reads should be ours).

Lightning's bar reads the logged metrics after every training batch, and reading a metric that
lives on the GPU (the loss) is a host synchronisation: the host waits for the step's last kernel
before it may prepare the next step, so a replayed step, whose GPU work is shorter than the
host's, loses the overlap. The bar here reads them at most once per ``metrics_every_s`` while
training, and always at an epoch's end and after validation, so what it shows at those points is
exact and in between at most that old. The training loss, which the module keeps off Lightning's
bar for that reason, is added here as ``loss`` (the last logged value).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import RichProgressBar
from typing_extensions import override

from lucid_yolo.cli.errors import CliError

Metrics = dict[str, int | str | float | dict[str, float]]

LOSS = "train/loss"
"""The logged training loss, shown as ``loss``: the module keeps it off Lightning's bar."""


class RunProgressBar(RichProgressBar):
    """:class:`~lightning.pytorch.callbacks.RichProgressBar` minus the ``v_num`` column, plus the
    last logged training loss, reading the metrics at most once per ``metrics_every_s`` between
    epoch ends.

    Args:
        metrics_every_s: least seconds between two reads of the metrics during training.
        clock: seconds on a monotonic clock (tests pass a fake one).
        **kwargs: passed to :class:`~lightning.pytorch.callbacks.RichProgressBar`.

    Raises:
        CliError: a negative ``metrics_every_s``.
    """

    def __init__(
        self,
        metrics_every_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        **kwargs: Any,
    ) -> None:
        if metrics_every_s < 0:
            raise CliError(f"metrics_every_s must be >= 0 seconds, got {metrics_every_s!r}")
        super().__init__(**kwargs)
        self.metrics_every_s = metrics_every_s
        self._clock = clock
        self._shown: Metrics = {}
        self._read_at = -math.inf

    @override
    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> Metrics:
        now = self._clock()
        if now - self._read_at >= self.metrics_every_s:
            self._shown = super().get_metrics(trainer, pl_module)
            self._shown.pop("v_num", None)
            loss = trainer.callback_metrics.get(LOSS)
            if loss is not None:
                self._shown["loss"] = float(loss)
            self._read_at = now
        return self._shown

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._read_at = -math.inf
        super().on_train_epoch_end(trainer, pl_module)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._read_at = -math.inf
        super().on_validation_end(trainer, pl_module)


__all__ = ["RunProgressBar"]
