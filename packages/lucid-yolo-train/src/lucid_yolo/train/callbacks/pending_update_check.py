"""On an exception, undo a replayed update whose step's loss was not finite.

A replayed update runs before the non-finite loss guard reads its step's verdict
(:mod:`lucid_yolo.train.non_finite_loss`); the module reads it before the next step, validation
and every checkpoint. A fit can also end between those points: a failing batch fetch, a
callback's error, Ctrl+C. This callback reads the verdict then, so that the model left in memory
never holds a non-finite step's update. The module adds it itself (``configure_callbacks``).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override


@runtime_checkable
class _SettlesUpdates(Protocol):
    def settle_update(self, *, failing: bool = False) -> None: ...


class PendingUpdateCheck(Callback):
    """Settle the loss guard's pending verdict when the fit ends with an exception.

    Notes:
        Lightning calls ``on_exception`` of the trainer's callbacks before the module's own, so
        ``SigtermCheckpoint`` has already settled the verdict while saving (a checkpoint reads
        the module's ``state_dict``, which settles first, and under ``stop`` refuses the save).
    """

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if isinstance(pl_module, _SettlesUpdates):
            pl_module.settle_update(failing=True)


__all__ = ["PendingUpdateCheck"]
