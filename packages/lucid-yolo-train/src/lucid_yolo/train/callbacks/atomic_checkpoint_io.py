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
does not wait for the device), every CPU tensor is cloned. The optimizer's state reaches it
already on the host: ``MuSGD.state_dict`` copies it there and waits for those copies, behind the
work queued before the save. The file holds the state of the save's moment, every tensor
contiguous on the CPU (loading restores onto the fit's device and layout: Lightning and the
optimizer copy into the live tensors).
Writes, removals and loads run in the order they were asked (one writer thread: the stale
temporary files a write removes are never another write's); a load and the fit's end wait for
the writes before them; a write that failed raises there or at the next save, with the file
named, and when the fit is already failing it becomes a note on that error instead of hiding it.

A second save of the same state (:meth:`AtomicCheckpointIO.save_again`, which
:class:`~lucid_yolo.train.trainer.YoloTrainer` calls for ``last.ckpt`` after ``best.ckpt`` of
the same epoch's end) reuses the previous save's snapshot, with only the entries that may differ
copied anew; when they hold the same, the file is a hard link of the previous one, made
atomically like a write (session 9: the two saves of an epoch held the training thread
0.42-0.48 s at detect batch 16 on the H200, their writes in the background or not).

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
from typing_extensions import override

from lucid_yolo.train.checkpoint_snapshot import fill, host_snapshot, same_content
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

    def write(temp: Path) -> None:
        # O_EXCL: never write through a file or link that is already there; 0o666 & umask: the
        # permissions of an ordinary new file, as torch.save would give it.
        descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(descriptor, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())

    _replace(Path(path), write)


def atomic_link(source: str | Path, path: str | Path) -> None:
    """Make ``path`` another name of the file ``source`` (a hard link), replacing ``path``
    atomically: a reader sees its old file or ``source``'s, never neither.

    ``source``'s bytes are already on disk (:func:`atomic_save` fsynced them); only the new
    folder entry is made durable. Later saves replace either name by a new file, so the two
    names part again then.

    Raises:
        OSError: the file system has no hard links, or ``source`` is on another one.
    """
    _replace(Path(path), lambda temp: os.link(source, temp))


def _replace(target: Path, make: Callable[[Path], None]) -> None:
    """Have ``make`` create a temporary file beside ``target``, then put it in its place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    # what a save killed mid-write left of this checkpoint (one writer per file: rank 0)
    for stale in target.parent.glob(f".{glob.escape(target.name)}.*{TEMP_SUFFIX}"):
        stale.unlink(missing_ok=True)
    temp = target.with_name(f".{target.name}.{uuid.uuid4().hex}{TEMP_SUFFIX}")
    try:
        make(temp)
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


class _Save:
    """What one save writes: a snapshot, or an earlier save's with some top-level entries
    replaced by a snapshot of their own (:meth:`AtomicCheckpointIO.save_again`).

    Args:
        number: the save's number in its IO (which file holds which save).
        entries: the snapshot of this save's own entries (its layout and copies).
        base: the save whose other entries this one writes too.
    """

    __slots__ = ("base", "entries", "number")

    def __init__(self, number: int, entries: tuple[Any, HostCopies], base: _Save | None) -> None:
        self.number = number
        self.entries = entries
        self.base = base

    def checkpoint(self) -> dict[str, Any]:
        """The checkpoint to write, each tensor its own (once the copies landed)."""
        if self.base is None:
            return fill(*self.entries)  # type: ignore[no-any-return]
        checkpoint = self.base.checkpoint()
        checkpoint.update(fill(*self.entries))  # a replaced entry keeps its place
        return checkpoint

    def entry(self, key: str) -> Any:
        """The checkpoint's top-level entry ``key`` alone (``KeyError`` when it has none)."""
        layout, copies = self.entries
        if key in layout:
            return fill(layout[key], copies)
        if self.base is None:
            raise KeyError(key)
        return self.base.entry(key)

    def repeats_base(self) -> bool:
        """Whether this save's own entries hold what its base's did (the same file content)."""
        if self.base is None:
            return False
        base = self.base
        try:
            return all(
                same_content(value, base.entry(key)) for key, value in fill(*self.entries).items()
            )
        except KeyError:  # an entry the base had not
            return False


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
        self._saves = 0
        self._previous: _Save | None = None
        # which save each file holds, as its writer left it (read and written by jobs only)
        self._on_disk: dict[Path, int] = {}

    @property
    def last_save(self) -> int | None:
        """The number of the last save, which :meth:`save_again` repeats; ``None`` before the
        first save and after :meth:`teardown` (the end of a fit)."""
        return None if self._previous is None else self._previous.number

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
        self._save(host_snapshot(checkpoint), None, Path(path))

    def save_again(self, path: _PATH, replaced: dict[str, Any]) -> None:
        """Write the last save's checkpoint again, to ``path``, with the top-level entries in
        ``replaced`` (snapshotted now) in place of its own.

        For a second save of the same state (:class:`~lucid_yolo.train.trainer.YoloTrainer`:
        ``best`` and ``last`` of one moment of a fit), where only a few entries may differ
        (the callbacks' states: a ``ModelCheckpoint`` records the file it writes): the other
        tensors are not copied again. When the replaced entries hold what the last save's
        did, and its file is on disk as written, ``path`` becomes a hard link of that file
        (:func:`atomic_link`) instead of a second serialisation of the same content.

        Raises:
            RuntimeError: no save to repeat (:attr:`last_save` is ``None``).
            Exception: an earlier background write or removal failed (as
                :meth:`save_checkpoint`).
        """
        if self._previous is None:
            raise RuntimeError(
                "AtomicCheckpointIO.save_again: no save to repeat (none yet, or the fit ended "
                "since); write the checkpoint with save_checkpoint"
            )
        self._save(host_snapshot(replaced), self._previous, Path(path))

    @override
    def remove_checkpoint(self, path: _PATH) -> None:
        """Remove ``path`` after the writes asked before (one may be writing it)."""
        if not self.background:
            self.wait()
            self._remove(Path(path))
            return
        self._raise_failed()
        self._submit(self._remove, Path(path), what=f"removing {path}")

    def _save(self, entries: tuple[Any, HostCopies], base: _Save | None, path: Path) -> None:
        self._saves += 1
        save = self._previous = _Save(self._saves, entries, base)
        if not self.background:
            self.wait()
            self._write(save, path)  # the same file as a background write
            return
        self._raise_failed()
        self._submit(self._write, save, path, what=f"writing {path}")

    def _write(self, save: _Save, path: Path) -> None:
        """Wait for the snapshot's copies and write ``save`` to ``path`` atomically (a job: on
        the writer thread, or on the caller's when not in the background, the same file either
        way); as a link when it repeats a save on disk with the same content."""
        source = None
        if save.base is not None:
            number = save.base.number
            source = next((p for p, n in self._on_disk.items() if n == number), None)
        self._on_disk.pop(path, None)
        if source is not None and save.repeats_base():
            try:
                atomic_link(source, path)
            except OSError:  # no hard links there: the same content, written
                atomic_save(save.checkpoint(), path)
        else:
            atomic_save(save.checkpoint(), path)
        self._on_disk[path] = save.number

    def _remove(self, path: Path) -> None:
        self._on_disk.pop(path, None)
        super().remove_checkpoint(path)

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
            self._previous = None
            self._on_disk.clear()
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
    "atomic_link",
    "atomic_save",
]
