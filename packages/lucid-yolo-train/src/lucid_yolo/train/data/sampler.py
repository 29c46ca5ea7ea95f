"""An epoch-aware sampler whose indices carry the epoch to the workers.

Augmentation draws from a generator seeded by ``(seed, epoch, index)``. Persistent workers keep
their own copy of the dataset, so an epoch set on the main process's dataset never reaches them;
instead :class:`EpochSampler` yields ``(epoch, index)`` pairs and the dataset reads the epoch from
the index it is asked for. Lightning calls :meth:`EpochSampler.set_epoch` before each training
epoch (as it does for a ``DistributedSampler``), so no hook is needed.
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

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order and augmentation the next iteration produces."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[tuple[int, int]]:
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            order = torch.randperm(self.length, generator=generator).tolist()
        else:
            order = list(range(self.length))
        return ((self.epoch, i) for i in order)


__all__ = ["EpochSampler"]
