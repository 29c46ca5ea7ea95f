"""The training batches of one epoch after another, as one stream the loader workers never leave.

A DataLoader with persistent workers still stops at each epoch's end: its workers get the next
epoch's first indices only when the next ``iter()`` comes, after validation, so the first step of
every epoch waits for a whole batch to be loaded (issue 11, epoch turnover). :class:`EpochBatches`
is a batch sampler without end. It yields epoch ``e``'s batches from a given one on, then every
batch of ``e + 1``, and so on, each as :class:`~lucid_yolo.train.data.sampler.EpochSampler` and
``BatchSampler`` would cut them. A DataLoader iterating it keeps ``prefetch_factor`` batches per
worker in flight across the boundary, so the next epoch's first batches load while this one's
last steps and its validation run. :class:`BatchStream` holds that DataLoader for the training
loader (:class:`~lucid_yolo.train.data.resumable_loader.ResumableLoader`) and the validation one
(:class:`~lucid_yolo.train.data.repeating_loader.RepeatingLoader`) alike, and ends it when the
data module's stage ends (:meth:`StreamedLoader.end_stream`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from torch.utils.data import DataLoader, Dataset

from lucid_yolo.train.data.sampler import EpochSampler

STREAM_REPLACES = frozenset(
    {"batch_size", "shuffle", "sampler", "batch_sampler", "drop_last", "persistent_workers"}
)
"""DataLoader options a stream replaces: its batch sampler cuts the batches, and its one
iterator serves every epoch, so it needs no persistent workers."""


def _batches_per_epoch(samples: int, batch_size: int, *, drop_last: bool) -> int:
    """Batches of ``batch_size`` in an epoch of ``samples``, as ``len(DataLoader)`` counts them."""
    full, rest = divmod(samples, batch_size)
    return full + (1 if rest and not drop_last else 0)


class EpochBatches:
    """Batches of ``(epoch, index)`` pairs: epoch ``epoch`` from batch ``first`` on, then the next.

    Args:
        sampler: gives each epoch's order (:meth:`EpochSampler.shard`).
        batch_size: samples per batch.
        drop_last: leave out each epoch's last batch when it is short.
        epoch: the epoch of the first batch.
        first: the index of the first batch within that epoch.

    Raises:
        ValueError: an epoch holds no batch (the stream would never yield), or ``first`` is
            past the epoch's batches.

    Attributes:
        dispatched: ``(epoch, batch)`` of the last batch handed out (to the DataLoader, which
            hands it to a worker); ``None`` before the first.
    """

    def __init__(
        self, sampler: EpochSampler, batch_size: int, *, drop_last: bool, epoch: int, first: int
    ) -> None:
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.epoch = epoch
        self.first = first
        count = self.batches_per_epoch
        if count == 0:
            raise ValueError(
                f"an epoch of {len(sampler)} samples holds no batch of {batch_size} with "
                f"drop_last={drop_last!r}; use a smaller batch size or keep the last batch"
            )
        if not 0 <= first <= count:
            raise ValueError(f"first={first!r} must be in [0, {count}] (batches per epoch)")
        self.dispatched: tuple[int, int] | None = None

    @property
    def batches_per_epoch(self) -> int:
        """Batches in every epoch, as ``len(DataLoader)`` counts them."""
        return _batches_per_epoch(len(self.sampler), self.batch_size, drop_last=self.drop_last)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        epoch, first = self.epoch, self.first
        while True:
            shard = self.sampler.shard(epoch)
            for batch in range(first, self.batches_per_epoch):
                indices = shard[batch * self.batch_size : (batch + 1) * self.batch_size]
                self.dispatched = (epoch, batch)
                yield [(epoch, i) for i in indices]
            epoch, first = epoch + 1, 0


class BatchStream:
    """A loader's worker stream: one DataLoader iterator over :class:`EpochBatches`, asked for
    batches by position, restarted where it does not stand, ended on demand.

    The stream is the only holder of its DataLoader iterator: the loaders' iterations ask it for
    each batch by ``(epoch, batch)`` instead of keeping the iterator, so :meth:`end` drops the
    last reference and the iterator's finalizer stops the workers at once, everything it uses
    still alive. Left to the garbage collector, the iterator instead costs 5 s per worker (issue
    11, session 9): it becomes garbage inside a reference cycle (the trainer, its loaders, their
    suspended iterations), and CPython's collector calls the weak-reference callbacks of cyclic
    garbage before its finalizers. The workers' index queues (``multiprocessing.Queue``) close
    their feeder threads in such a callback; the iterator's finalizer then puts each worker's stop
    signal into a queue whose feeder thread is gone, the signal is never sent, and torch waits
    out its 5 s join timeout for each worker before it terminates them.

    Args:
        dataset: the loader's dataset.
        sampler: gives each epoch's order.
        batch_size: samples per batch.
        options: the loader's DataLoader keyword options; those in :data:`STREAM_REPLACES` are
            left out.
        drop_last: leave out each epoch's last batch when it is short.

    Attributes:
        started: streams started so far.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        sampler: EpochSampler,
        batch_size: int,
        options: Mapping[str, Any],
        *,
        drop_last: bool,
    ) -> None:
        self.dataset = dataset
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last
        self._options = {key: value for key, value in options.items() if key not in STREAM_REPLACES}
        self._batches: EpochBatches | None = None
        self._current: Iterator[Any] | None = None
        self._next: tuple[int, int] | None = None  # the current iterator's next batch
        self.started = 0

    def start(self, epoch: int, first: int) -> None:
        """Stand at batch ``first`` of ``epoch``: keep the current stream if it stands there,
        else end it and start a new one there (its workers fork now and begin loading).

        ``first`` may be the epoch's batch count: that is the next epoch's start.
        """
        position = self._position(epoch, first)
        if self._next == position:
            return
        self.end()  # the old workers shut down before the new ones start
        self._batches = EpochBatches(
            self.sampler,
            self.batch_size,
            drop_last=self.drop_last,
            epoch=position[0],
            first=position[1],
        )
        self._current = iter(DataLoader(self.dataset, batch_sampler=self._batches, **self._options))
        self._next = position
        self.started += 1

    def batch(self, epoch: int, index: int) -> Any:
        """Batch ``index`` of ``epoch``, from the current stream if it stands there, else from
        a new one started there (:meth:`start`)."""
        self.start(epoch, index)
        assert self._current is not None
        batch = next(self._current)
        self._next = self._position(epoch, index + 1)
        return batch

    def end(self) -> None:
        """Shut the workers down now, their loaded batches dropped; the next :meth:`batch` or
        :meth:`start` starts a new stream. Nothing happens when none runs."""
        self._current = None
        self._next = None

    @property
    def dispatched(self) -> tuple[int, int] | None:
        """``(epoch, batch)`` of the last batch handed to the workers (``None`` before any)."""
        return None if self._batches is None else self._batches.dispatched

    def _position(self, epoch: int, batch: int) -> tuple[int, int]:
        """``(epoch, batch)`` with an epoch's end written as the next epoch's start."""
        count = _batches_per_epoch(len(self.sampler), self.batch_size, drop_last=self.drop_last)
        return (epoch + 1, 0) if batch >= count else (epoch, batch)


class StreamedLoader:
    """What a loader that holds a :class:`BatchStream` tells of it; mixed into the training and
    the validation loader, which keep theirs in ``_stream``."""

    _stream: BatchStream

    @property
    def streams(self) -> int:
        """Streams started so far: the first, then one per iteration that could not continue
        the current one (an epoch or pass left early, a resume, another epoch set)."""
        return self._stream.started

    @property
    def dispatched(self) -> tuple[int, int] | None:
        """``(epoch, batch)`` of the last batch handed to the workers, an epoch being a pass
        of the validation loader (``None`` before any, or without workers)."""
        return self._stream.dispatched

    def end_stream(self) -> None:
        """Shut the loader's workers down now, the batches they loaded ahead dropped.

        The data module calls it when a fit, validation or test ends, or fails
        (:meth:`~lucid_yolo.train.data.datamodule.YoloDataModule.teardown`); whoever iterates
        the loader outside a Trainer calls it when done. Iterating the loader again starts a
        new stream where the iteration stands, with the same batches; an iteration suspended
        meanwhile continues from a new stream too.
        """
        self._stream.end()


__all__ = ["STREAM_REPLACES", "BatchStream", "EpochBatches", "StreamedLoader"]
