"""Write ``last.ckpt`` when the fit is stopped by SIGTERM, before the process exits.

Lightning (2.6) already turns SIGTERM into a clean stop: its handler only sets a flag, the training
loop finishes the batch in flight (optimizer step and EMA included) and then raises
``SIGTERMException``, which reaches every callback's ``on_exception``. What it does not do is
save. This callback saves there, and only there: a fit stopped by any other exception (a
non-finite loss, an out-of-memory error) keeps its last good ``last.ckpt`` instead of having it
overwritten by the state that failed.

The checkpoint is written at a batch boundary, so resuming from it (``--ckpt_path last.ckpt``)
continues mid-epoch with the next batch; the train loader restores its position
(:class:`~lucid_yolo.train.data.resumable_loader.ResumableLoader`).
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from lucid_yolo.train.callbacks.atomic_checkpoint_io import AtomicCheckpointIO
from lucid_yolo.train.console import print_line


class SigtermCheckpoint(Callback):
    """On SIGTERM, save the fit to ``<checkpoint dir>/<filename>.ckpt`` (module docstring).

    Args:
        filename: checkpoint name without ``.ckpt``; ``last`` is what ``lucid-yolo fit``
            rewrites every epoch, so a resume needs no other path.

    Raises:
        ValueError: an empty ``filename`` or one with a folder in it.

    Notes:
        The folder is the first ``ModelCheckpoint``'s (``<root>/checkpoints`` without one).
        ``on_exception`` fires after Lightning marked the fit interrupted and before it tears the
        trainer down, so the model, optimizer and loops still hold the state of the last
        completed batch.
    """

    def __init__(self, filename: str = "last") -> None:
        if not filename or Path(filename).name != filename:
            raise ValueError(f"filename={filename!r} must be a plain file name, e.g. 'last'")
        self.filename = filename
        self.saved_path: Path | None = None

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if isinstance(exception, SIGTERMException) and not trainer.sanity_checking:
            self._save(trainer)

    def _save(self, trainer: pl.Trainer) -> None:
        path = self._folder(trainer) / f"{self.filename}.ckpt"
        trainer.save_checkpoint(path)
        io = trainer.strategy.checkpoint_io
        if isinstance(io, AtomicCheckpointIO):
            # a background write: say "saved" only once it is on disk; raising here would make
            # Lightning skip its teardown, so a failure is said and the SIGTERM stop goes on
            try:
                io.wait()
            except Exception as error:
                print_line(f"SIGTERM: writing {path} failed ({type(error).__name__}: {error})")
                return
        self.saved_path = path
        print_line(
            f"SIGTERM: saved {path} at step {trainer.global_step}; resume with --ckpt_path {path}"
        )

    @staticmethod
    def _folder(trainer: pl.Trainer) -> Path:
        callback = trainer.checkpoint_callback
        if isinstance(callback, ModelCheckpoint) and callback.dirpath is not None:
            return Path(callback.dirpath)
        return Path(trainer.default_root_dir) / "checkpoints"


__all__ = ["SigtermCheckpoint"]
