"""An epoch-aware sampler whose indices carry the epoch to the workers.

Augmentation draws from a generator seeded by ``(seed, epoch, index)``. Persistent workers keep
their own copy of the dataset, so an epoch set on the main process's dataset never reaches them;
instead :class:`EpochSampler` yields ``(epoch, index)`` pairs and the dataset reads the epoch from
the index it is asked for. Lightning calls :meth:`EpochSampler.set_epoch` before each training
epoch (as it does for a ``DistributedSampler``), so no hook is needed.

Under DDP Lightning wraps a custom sampler in its ``DistributedSamplerWrapper`` and calls
``set_epoch`` on the wrapper. Lightning 2.6 forwards it to the sampler, 2.5 does not. So an
iteration that was not preceded by ``set_epoch`` advances the epoch by itself, and augmentation
does not repeat across epochs either way. (On 2.5 a resumed DDP run counts those epochs from 0
again.)

A fit resumed mid-epoch starts the epoch's order part-way: :meth:`EpochSampler.resume_at` makes
the next iteration skip the indices already trained on, so the rest of the epoch is the same
samples in the same order as without the interruption (issue 15).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


class EpochSampler(Sampler[tuple[int, int]]):
    """Yields ``(epoch, index)`` over ``range(length)``, shuffled per epoch when asked.

    Args:
        length: dataset size.
        shuffle: draw a new permutation each epoch from ``(seed, epoch)``.
        seed: base seed of the permutation.
    """

    def __init__(self, length: int, *, shuffle: bool = True, seed: int = 0) -> None:
        self.length = length
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.start = 0
        self._epoch_given = True

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order and augmentation the next iteration produces."""
        self.epoch = epoch
        self._epoch_given = True

    def resume_at(self, epoch: int, start: int) -> None:
        """Make the next iteration epoch ``epoch``'s order from position ``start`` on.

        Raises:
            ValueError: ``start`` outside ``[0, length]``.
        """
        if not 0 <= start <= self.length:
            raise ValueError(f"start={start!r} must be in [0, {self.length}] (the dataset size)")
        self.set_epoch(epoch)
        self.start = start

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[tuple[int, int]]:
        if not self._epoch_given:
            self.epoch += 1
        self._epoch_given = False
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            order = torch.randperm(self.length, generator=generator).tolist()
        else:
            order = list(range(self.length))
        start, self.start = self.start, 0
        return ((self.epoch, i) for i in order[start:])


__all__ = ["EpochSampler"]
