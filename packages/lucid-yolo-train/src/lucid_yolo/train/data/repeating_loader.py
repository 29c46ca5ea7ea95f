"""The validation DataLoader whose workers load the next pass while the model trains.

A fit validates the same images in the same order after every epoch. With persistent workers a
DataLoader still stops at each pass's end: the workers get the next pass's first indices only
at the next ``iter()``, when validation has already begun, so every pass starts by waiting for a
batch to be loaded, and loads the rest while the network waits (issue 11, "validation at GPU
speed": 0.27 s of a 0.33 s pass at detect batch 32 on the H200 was the loader wait, session 6).
:class:`RepeatingLoader` iterates one DataLoader over the passes as one stream
(:class:`~lucid_yolo.train.data.epoch_batches.BatchStream`), so the workers load the next pass's
first ``prefetch_factor`` batches each as soon as this pass is handed out, during training.

The batches are those of a plain DataLoader over the same sampler, in the same order, every
pass: validation reads no random draw, and each pass is one epoch of the sampler's fixed order.
A pass left early (Lightning's sanity check, ``limit_val_batches``) leaves the stream mid-pass;
the next ``iter()`` then starts a new stream at a pass's start. A pass counts as ended when its
last batch is handed out, not when the iterator is asked past it: Lightning's evaluation loop
stops at the loader's length and never asks (session 8 found every pass restarting the stream,
its workers shut down and started again: 0.85 s a pass at detect batch 16 on the H200, 0.23 s
once fixed).

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
from lucid_yolo.train.data.epoch_batches import BatchStream, StreamedLoader
from lucid_yolo.train.data.sampler import EpochSampler


class RepeatingLoader(StreamedLoader, DataLoader[Targets]):
    """A DataLoader over an unshuffled :class:`EpochSampler` whose passes form one stream.

    Takes the arguments of ``DataLoader`` (options by keyword). Without workers it is a plain
    DataLoader: the main process loads each batch when it is asked for.

    Raises:
        TypeError: another sampler, a shuffling one (passes would differ), or no fixed batch
            size.
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
        self._stream = BatchStream(
            dataset, self.epoch_sampler, self.batch_size, options, drop_last=self.drop_last
        )
        self._passes = 0

    @override
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if self.num_workers == 0:
            yield from super().__iter__()
            return
        # each pass is the stream's next epoch: one whose last batch was handed out continues
        # the stream, one left early makes the next pass start a new stream
        this_pass, self._passes = self._passes, self._passes + 1
        for index in range(len(self)):
            # asked by position, not held: the stream stays its workers' only holder
            yield self._stream.batch(this_pass, index)


__all__ = ["RepeatingLoader"]
