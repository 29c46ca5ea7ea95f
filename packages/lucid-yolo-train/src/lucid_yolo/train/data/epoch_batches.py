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
(:class:`~lucid_yolo.train.data.repeating_loader.RepeatingLoader`) alike.
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
        full, rest = divmod(len(self.sampler), self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

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
    """A loader's worker stream: one DataLoader iterator over :class:`EpochBatches`, restarted
    where the loader needs it.

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
        self.current: Iterator[Any] | None = None
        self.started = 0

    def restart(self, epoch: int, first: int) -> Iterator[Any]:
        """A new stream from batch ``first`` of ``epoch`` on; the current one's workers shut down
        before the new ones start."""
        self.current = None
        self._batches = EpochBatches(
            self.sampler, self.batch_size, drop_last=self.drop_last, epoch=epoch, first=first
        )
        self.current = iter(DataLoader(self.dataset, batch_sampler=self._batches, **self._options))
        self.started += 1
        return self.current

    @property
    def dispatched(self) -> tuple[int, int] | None:
        """``(epoch, batch)`` of the last batch handed to the workers (``None`` before any)."""
        return None if self._batches is None else self._batches.dispatched


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


__all__ = ["STREAM_REPLACES", "BatchStream", "EpochBatches", "StreamedLoader"]
