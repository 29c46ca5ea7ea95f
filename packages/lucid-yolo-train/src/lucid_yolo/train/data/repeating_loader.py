"""The validation DataLoader whose workers load the next pass while the model trains.

A fit validates the same images in the same order after every epoch. With persistent workers a
DataLoader still stops at each pass's end: the workers get the next pass's first indices only
at the next ``iter()``, when validation has already begun, so every pass starts by waiting for a
batch to be loaded, and loads the rest while the network waits (issue 11, "validation at GPU
speed": 0.27 s of a 0.33 s pass at detect batch 32 on the H200 was the loader wait, session 6).
:class:`RepeatingLoader` iterates one DataLoader over the passes as one stream
(:func:`~lucid_yolo.train.data.epoch_batches.batch_stream`), so the workers load the next pass's
first ``prefetch_factor`` batches each as soon as this pass is handed out, during training.

The batches are those of a plain DataLoader over the same sampler, in the same order, every
pass: validation reads no random draw, and each pass is one epoch of the sampler's fixed order.
A pass left early (Lightning's sanity check, ``limit_val_batches``) leaves the stream mid-pass;
the next ``iter()`` then starts a new stream at a pass's start.

What it costs: the next pass's first batches wait in memory (shared, and pinned when the loader
pins) from the end of one validation to the start of the next, at most ``num_workers ×
prefetch_factor`` batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader
from typing_extensions import override

from lucid_yolo.train.data.augment.targets import Targets
from lucid_yolo.train.data.epoch_batches import EpochBatches, batch_stream
from lucid_yolo.train.data.sampler import EpochSampler


class RepeatingLoader(DataLoader[Targets]):
    """A DataLoader over an unshuffled :class:`EpochSampler` whose passes form one stream.

    Takes the arguments of ``DataLoader`` (options by keyword). Without workers it is a plain
    DataLoader: the main process loads each batch when it is asked for.

    Raises:
        TypeError: another sampler, a shuffling one (passes would differ), or no fixed batch
            size.

    Attributes:
        streams: streams started so far (one per pass left early, plus the first).
    """

    def __init__(self, dataset: Any, **options: Any) -> None:
        super().__init__(dataset, **options)
        if not isinstance(self.sampler, EpochSampler) or self.sampler.shuffle:
            raise TypeError(
                f"RepeatingLoader needs an EpochSampler that does not shuffle, got "
                f"{type(self.sampler).__name__}"
                f"{' that shuffles' if isinstance(self.sampler, EpochSampler) else ''}"
            )
        if self.batch_size is None:
            raise TypeError("RepeatingLoader needs a batch size, got batch_size=None")
        self.epoch_sampler: EpochSampler = self.sampler
        self._options = options
        self._stream: Iterator[Any] | None = None
        self._stream_batches: EpochBatches | None = None
        self._at_pass_start = False
        self.streams = 0

    @override
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if self.num_workers == 0:
            yield from super().__iter__()
            return
        batches = self._stream_at_pass_start()
        self._at_pass_start = False
        for _ in range(len(self)):
            yield next(batches)
        self._at_pass_start = True

    @property
    def dispatched(self) -> tuple[int, int] | None:
        """``(pass, batch)`` of the last batch handed to the workers (``None`` without them)."""
        return None if self._stream_batches is None else self._stream_batches.dispatched

    def _stream_at_pass_start(self) -> Iterator[Any]:
        """The current stream if a pass ended there, else a new one (a pass left early)."""
        if self._stream is None or not self._at_pass_start:
            self._stream = None  # its workers shut down before the new ones start
            self._stream, self._stream_batches = batch_stream(
                self.dataset,
                self.epoch_sampler,
                int(self.batch_size or 1),
                self._options,
                drop_last=self.drop_last,
                epoch=0,
                first=0,
            )
            self.streams += 1
        return self._stream


__all__ = ["RepeatingLoader"]
