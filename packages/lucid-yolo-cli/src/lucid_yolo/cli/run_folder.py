"""Run folders a user can predict: ``runs/<task>/<command><N>``.

Every Lightning command writes into its own folder under ``--trainer.default_root_dir``
(``runs``): the first ``fit`` of a detector goes to ``runs/detect/fit1``, the next to
``runs/detect/fit2``, a ``predict`` after them to ``runs/detect/predict1``. The folder holds the
resolved ``config.yaml``, the CSV metrics, ``checkpoints/`` (``fit``) or the prediction files
(``predict``). The number is the lowest one not taken when the command starts; the logger creates
the folder once the run is under way, so a command refused for a bad option leaves nothing behind,
and one that fails before writing into it (data refused by the data module's set-up, which
Lightning runs after the logger has made the folder) has the empty folder removed
(:class:`EmptyRunFolderRemover`), so that the next run does not skip its number.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lucid_yolo.cli.errors import CliError

MAX_RUNS = 100_000
"""Upper bound of the search for a free number; reaching it means the folder is not a runs tree."""


def next_run_folder(root: str | Path, task: str, command: str) -> Path:
    """``root/task/command<N>`` for the lowest ``N >= 1`` whose folder does not exist yet.

    Args:
        root: ``--trainer.default_root_dir``.
        task: ``detect``, ``segment``, ``pose`` or ``obb``.
        command: ``fit``, ``validate``, ``test`` or ``predict``.

    Raises:
        CliError: every number up to :data:`MAX_RUNS` is taken.
    """
    parent = Path(root) / task
    for number in range(1, MAX_RUNS + 1):
        folder = parent / f"{command}{number}"
        if not folder.exists():
            return folder
    raise CliError(
        f"{str(parent)!r} already holds {MAX_RUNS} {command} runs; "
        "point --trainer.default_root_dir somewhere else"
    )


class EmptyRunFolderRemover(Callback):
    """Removes the command's run folder when the command fails while the folder is still empty.

    Only an empty folder goes: whatever the run wrote (its ``config.yaml``, a checkpoint) stays,
    and every rank of a multi-process run may try, since removing an empty folder twice is
    harmless.

    Args:
        folder: the run folder :func:`next_run_folder` chose for this command.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        # rmdir refuses a folder that holds anything, and one already gone is what was wanted
        with contextlib.suppress(OSError):
            self.folder.rmdir()


__all__ = ["MAX_RUNS", "EmptyRunFolderRemover", "next_run_folder"]
