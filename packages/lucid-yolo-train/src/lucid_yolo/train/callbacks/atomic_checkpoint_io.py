"""Checkpoints written atomically in their own folder and read back with ``weights_only=True``.

Lightning's ``TorchCheckpointIO`` writes through an fsspec transaction, which for a local path
stages the file in the system temporary folder and then moves it: across file systems that move is
a copy (a kill during it leaves a truncated ``last.ckpt``), nothing is fsynced, and the bytes pass
through a folder outside the run. Here the file is written next to its target under a hidden
temporary name, fsynced, and put in place with ``os.replace``, which is atomic within one folder:
a reader (or a resume after SIGKILL) sees the old checkpoint or the new one, never half of one.

During a fit the write can run on a background thread, so training goes on while the file is
serialised and fsynced (issue 11: ``best.ckpt`` and ``last.ckpt`` took 0.385 s of every epoch of
the detect batch-16 fit on the H200, a quarter of its training seconds).
:class:`BackgroundCheckpointWrites` turns it on when the fit starts, unless a logger uploads
checkpoint files right after each save (W&B's or MLflow's ``log_model``: they would read a file
not yet written); ``teardown`` at the fit's end turns it off again, so a save outside a fit is on
disk when ``Trainer.save_checkpoint`` returns, as Lightning promises. What is written, in the
background or not, is a snapshot taken when Lightning asks for the save: every CUDA tensor is
copied into pinned host memory behind the work already queued
(:class:`~lucid_yolo.train.host_copy.HostCopies`, read by the writer, so the snapshot itself
does not wait for the device), every CPU tensor is cloned. The file holds the state of the
save's moment, every tensor contiguous on the CPU (loading restores onto the fit's device and
layout: Lightning and the optimizer copy into the live tensors).
Writes, removals and loads run in the order they were asked (one writer thread: the stale
temporary files a write removes are never another write's); a load and the fit's end wait for
the writes before them; a write that failed raises there or at the next save, with the file
named, and when the fit is already failing it becomes a note on that error instead of hiding it.

Loading always restricts unpickling to tensors and plain containers (``weights_only=True``):
every checkpoint lucid-yolo writes holds nothing else, and a checkpoint from elsewhere cannot run
code on load (issue 15).

Example:
    >>> trainer = pl.Trainer(plugins=[AtomicCheckpointIO()])  # doctest: +SKIP
"""

from __future__ import annotations

import glob
import os
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor
from typing_extensions import override

from lucid_yolo.train.console import print_line
from lucid_yolo.train.host_copy import HostCopies

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


class _Slot:
    """Where a snapshot's tensor goes back into its checkpoint (a leaf, not a collection)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def host_snapshot(checkpoint: Any) -> tuple[Any, HostCopies]:
    """``checkpoint``'s layout with a slot for each tensor, and host copies of the tensors now.

    :func:`fill` puts the copies back; the caller may change the tensors meanwhile.
    """
    tensors: list[Tensor] = []

    def slot(tensor: Tensor) -> _Slot:
        tensors.append(tensor)
        return _Slot(len(tensors) - 1)

    layout = _with_metadata(checkpoint, apply_to_collection(checkpoint, Tensor, slot))
    return layout, HostCopies(tensors)


def fill(layout: Any, copies: HostCopies) -> Any:
    """The checkpoint of :func:`host_snapshot`, each tensor its own (once the copies landed).

    A state dict's ``_metadata`` (the modules' versions, which ``load_state_dict`` passes to
    their loaders) is kept: ``apply_to_collection`` rebuilds mappings without attributes.
    """
    tensors = copies.read()
    return _with_metadata(
        layout,
        apply_to_collection(layout, _Slot, lambda slot: tensors[slot.index].clone()),
    )


def _with_metadata(source: Any, rebuilt: Any) -> Any:
    """``rebuilt`` with every ``_metadata`` attribute of ``source``'s mappings copied over."""
    if isinstance(source, dict) and isinstance(rebuilt, dict):
        metadata = getattr(source, "_metadata", None)
        if metadata is not None:
            rebuilt._metadata = metadata  # type: ignore[attr-defined]
        for key, value in source.items():
            _with_metadata(value, rebuilt[key])
    elif isinstance(source, (list, tuple)) and isinstance(rebuilt, (list, tuple)):
        for value, copy in zip(source, rebuilt, strict=True):
            _with_metadata(value, copy)
    return rebuilt


def _write(layout: Any, copies: HostCopies, path: Path) -> None:
    """Wait for the snapshot's copies and write it atomically (on the writer thread, or on the
    caller's when not in the background: the same file either way)."""
    atomic_save(fill(layout, copies), path)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint IO: atomic saves, in the background during a fit that asks for it,
    ``weights_only=True`` loads (module docstring).

    Attributes:
        background: write on the writer thread (set by :class:`BackgroundCheckpointWrites` for
            the length of a fit); otherwise a save is on disk when it returns.
    """

    def __init__(self) -> None:
        super().__init__()
        self.background = False
        self._writer: ThreadPoolExecutor | None = None
        self._pending: list[tuple[Future[None], str]] = []

    @override
    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None
    ) -> None:
        """Snapshot ``checkpoint`` and write it to ``path`` atomically: in the background when
        :attr:`background` is on, else before returning (after the writes asked before).

        Raises:
            TypeError: ``storage_options`` given (a local file has none).
            Exception: an earlier background write or removal failed (its own type, with a note
                naming the file).
        """
        if storage_options is not None:
            raise TypeError(
                f"storage_options={storage_options!r}: AtomicCheckpointIO writes local files and "
                "takes none; drop the argument"
            )
        if not self.background:
            self.wait()
            _write(*host_snapshot(checkpoint), Path(path))  # the same file as a background write
            return
        self._raise_failed()
        self._submit(_write, *host_snapshot(checkpoint), Path(path), what=f"writing {path}")

    @override
    def remove_checkpoint(self, path: _PATH) -> None:
        """Remove ``path`` after the writes asked before (one may be writing it)."""
        if not self.background:
            self.wait()
            super().remove_checkpoint(path)
            return
        self._raise_failed()
        self._submit(super().remove_checkpoint, path, what=f"removing {path}")

    @override
    def load_checkpoint(
        self,
        path: _PATH,
        map_location: Callable[..., Any] | None = lambda storage, loc: storage,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        """Read ``path`` with ``weights_only=True`` whatever the caller asked, once the writes
        asked before are on disk.

        Raises:
            FileNotFoundError: no such checkpoint.
            pickle.UnpicklingError: the file holds objects beyond tensors and plain containers.
        """
        self.wait()
        return super().load_checkpoint(path, map_location=map_location, weights_only=True)

    def wait(self) -> None:
        """Block until every write and removal asked so far is done.

        Raises:
            Exception: the first that failed (its own type, with a note naming the file).
        """
        pending, self._pending = self._pending, []
        _raise_first_failure(pending)

    @override
    def teardown(self) -> None:
        """Finish the writes and stop the writer thread and background writing (the end of a
        fit, also when it fails).

        Raises:
            Exception: a write or removal failed, on a fit that did not fail otherwise. On a
                failing fit (Lightning tears down inside its ``except``) the failure becomes a
                note on the fit's own error, which goes on, and Lightning's teardown completes.
        """
        failing = sys.exc_info()[1]
        try:
            self.wait()
        except Exception as error:
            if failing is None:
                raise
            failing.add_note(f"and then: {type(error).__name__}: {error}")
            for note in getattr(error, "__notes__", []):
                failing.add_note(note)
        finally:
            self.background = False
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None

    def _submit(self, job: Callable[..., None], *args: Any, what: str) -> None:
        if self._writer is None:
            # one thread: jobs run in the order asked, and a write's removal of stale temporary
            # files of its target never meets another write of the same target
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self._pending.append((self._writer.submit(job, *args), what))

    def _raise_failed(self) -> None:
        """Raise a finished job's error now (the others go on) and forget the finished jobs."""
        finished = [job for job in self._pending if job[0].done()]
        self._pending = [job for job in self._pending if job not in finished]
        _raise_first_failure(finished)


def _raise_first_failure(jobs: list[tuple[Future[None], str]]) -> None:
    """Wait for every job and raise the first one's error, noted with what it and any later
    failed job did."""
    failed = [(error, what) for future, what in jobs if (error := future.exception()) is not None]
    if failed:
        first = failed[0][0]
        for error, what in failed:
            detail = "" if error is first else f" ({type(error).__name__}: {error})"
            first.add_note(f"AtomicCheckpointIO: {what} failed in the background{detail}")
        raise first


class BackgroundCheckpointWrites(Callback):
    """Has the fit's :class:`AtomicCheckpointIO` write in the background, from the fit's start
    to its end, unless a logger reads checkpoint files as soon as they are saved.

    A logger that uploads checkpoints (``log_model`` of W&B and MLflow, read from their
    ``_log_model``) looks for the newest files right after each save; with a background write it
    would upload the previous one. The fit then writes in its own thread and says why.
    """

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        io = trainer.strategy.checkpoint_io
        if not isinstance(io, AtomicCheckpointIO):
            return
        uploading = [type(lg).__name__ for lg in trainer.loggers if getattr(lg, "_log_model", None)]
        if uploading:
            if trainer.is_global_zero:
                print_line(
                    f"checkpoints: written in the training thread, since {', '.join(uploading)} "
                    "uploads each checkpoint file as soon as it is saved"
                )
            return
        io.background = True


__all__ = [
    "TEMP_SUFFIX",
    "AtomicCheckpointIO",
    "BackgroundCheckpointWrites",
    "atomic_save",
    "fill",
    "host_snapshot",
]
