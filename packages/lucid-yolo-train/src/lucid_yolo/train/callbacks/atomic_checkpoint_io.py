"""Checkpoints written atomically in their own folder and read back with ``weights_only=True``.

Lightning's ``TorchCheckpointIO`` writes through an fsspec transaction, which for a local path
stages the file in the system temporary folder and then moves it: across file systems that move is
a copy (a kill during it leaves a truncated ``last.ckpt``), nothing is fsynced, and the bytes pass
through a folder outside the run. Here the file is written next to its target under a hidden
temporary name, fsynced, and put in place with ``os.replace``, which is atomic within one folder:
a reader (or a resume after SIGKILL) sees the old checkpoint or the new one, never half of one.

Loading always restricts unpickling to tensors and plain containers (``weights_only=True``):
every checkpoint lucid-yolo writes holds nothing else, and a checkpoint from elsewhere cannot run
code on load (issue 15).

Example:
    >>> trainer = pl.Trainer(plugins=[AtomicCheckpointIO()])  # doctest: +SKIP
"""

from __future__ import annotations

import glob
import os
import uuid
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import TorchCheckpointIO
from typing_extensions import override

TEMP_SUFFIX = ".tmp"
"""Suffix of a checkpoint being written (``.last.ckpt.<random>.tmp`` beside ``last.ckpt``)."""


def atomic_save(obj: object, path: str | Path) -> None:
    """``torch.save`` ``obj`` to ``path`` so that ``path`` is never seen half written.

    Args:
        obj: what ``torch.save`` accepts.
        path: the target file; its folder is created.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # what a save killed mid-write left of this checkpoint (one writer per file: rank 0)
    for stale in target.parent.glob(f".{glob.escape(target.name)}.*{TEMP_SUFFIX}"):
        stale.unlink(missing_ok=True)
    temp = target.with_name(f".{target.name}.{uuid.uuid4().hex}{TEMP_SUFFIX}")
    try:
        # O_EXCL: never write through a file or link that is already there; 0o666 & umask: the
        # permissions of an ordinary new file, as torch.save would give it.
        descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(descriptor, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        with suppress(FileNotFoundError):
            temp.unlink()
        raise
    # the rename itself is durable only once the folder entry is on disk
    folder = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint IO: atomic saves, ``weights_only=True`` loads (module docstring)."""

    @override
    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None
    ) -> None:
        """Write ``checkpoint`` to ``path`` atomically.

        Raises:
            TypeError: ``storage_options`` given (a local file has none).
        """
        if storage_options is not None:
            raise TypeError(
                f"storage_options={storage_options!r}: AtomicCheckpointIO writes local files and "
                "takes none; drop the argument"
            )
        atomic_save(checkpoint, Path(path))

    @override
    def load_checkpoint(
        self,
        path: _PATH,
        map_location: Callable[..., Any] | None = lambda storage, loc: storage,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        """Read ``path`` with ``weights_only=True`` whatever the caller asked.

        Raises:
            FileNotFoundError: no such checkpoint.
            pickle.UnpicklingError: the file holds objects beyond tensors and plain containers.
        """
        return super().load_checkpoint(path, map_location=map_location, weights_only=True)


__all__ = ["TEMP_SUFFIX", "AtomicCheckpointIO", "atomic_save"]
