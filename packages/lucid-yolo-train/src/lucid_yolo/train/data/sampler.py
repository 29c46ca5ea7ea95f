"""An epoch-aware, shard-aware sampler whose indices carry the epoch to the workers.

Augmentation draws from a generator seeded by ``(seed, epoch, index)``. Persistent workers keep
their own copy of the dataset, so an epoch set on the main process's dataset never reaches them;
instead :class:`EpochSampler` yields ``(epoch, index)`` pairs and the dataset reads the epoch from
the index it is asked for. Lightning calls :meth:`EpochSampler.set_epoch` before each training
epoch, so no hook is needed; an iteration without a new ``set_epoch`` repeats the epoch, as
torch's ``DistributedSampler`` does.

Under data-parallel training every process builds the same sampler with its own ``rank``: the
epoch's order depends on ``(seed, epoch)`` only, and rank ``r`` takes every ``num_replicas``-th
position from ``r``. It is a ``DistributedSampler`` so that Lightning uses it as it is instead of
wrapping it in its own (which would shuffle on top of it with another seed and pad evaluation
shards with repeated images, issue 16).

A fit resumed mid-epoch starts the epoch's order part-way: :meth:`EpochSampler.resume_at` makes
the next iteration skip the positions of this rank's shard already trained on, so the rest of
the epoch is the same samples in the same order as without the interruption (issue 15).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Dataset, DistributedSampler


class _Positions(Dataset[int]):
    """``range(length)`` as the dataset ``DistributedSampler`` asks for (it reads the length)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        return index


class EpochSampler(DistributedSampler[tuple[int, int]]):
    """Yields ``(epoch, index)`` over this rank's shard of ``range(length)``.

    Args:
        length: dataset size.
        shuffle: draw a new permutation each epoch from ``(seed, epoch)``.
        seed: base seed of the permutation, the same on every rank.
        num_replicas: processes the epoch is split over (the trainer's world size).
        rank: this process's shard, in ``[0, num_replicas)``.
        equal_shards: every rank gets ``length // num_replicas`` positions, the last
            ``length % num_replicas`` of the epoch's order left out (training: data-parallel
            steps run in lockstep, so every rank needs the same number of batches; a shuffled
            order leaves out other images each epoch). Off, rank ``r`` gets every position
            ``r, r + num_replicas, …``: the shards differ in length by at most one and together
            hold every image exactly once (evaluation).

    Raises:
        ValueError: ``rank`` outside ``[0, num_replicas)``.
    """

    def __init__(
        self,
        length: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        equal_shards: bool = True,
    ) -> None:
        super().__init__(
            _Positions(length),
            num_replicas=num_replicas,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=equal_shards,
        )
        self.length = length
        self.equal_shards = equal_shards
        self.num_samples = len(range(rank, self._shard_end(), num_replicas))
        self.start = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order and augmentation the next iteration produces.

        A resume position (:meth:`resume_at`) belongs to its epoch: another epoch starts from
        its first position. A checkpoint written at an epoch's end holds that epoch complete,
        and the resumed fit's next epoch must not skip that many positions of its own.
        """
        if epoch != self.epoch:
            self.start = 0
        self.epoch = epoch

    def resume_at(self, epoch: int, start: int) -> None:
        """Make the next iteration epoch ``epoch``'s shard from position ``start`` on.

        Raises:
            ValueError: ``start`` outside ``[0, len(self)]``.
        """
        if not 0 <= start <= self.num_samples:
            raise ValueError(
                f"start={start!r} must be in [0, {self.num_samples}] (this rank's shard size)"
            )
        self.set_epoch(epoch)
        self.start = start

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[tuple[int, int]]:
        shard = self.shard(self.epoch)
        start, self.start = self.start, 0
        return ((self.epoch, i) for i in shard[start:])

    def shard(self, epoch: int) -> list[int]:
        """This rank's dataset indices of epoch ``epoch``, in order (the whole shard, no resume)."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            order = torch.randperm(self.length, generator=generator).tolist()
        else:
            order = list(range(self.length))
        return order[self.rank : self._shard_end() : self.num_replicas]

    def _shard_end(self) -> int:
        """End of the epoch's order that the shards are cut from."""
        if self.equal_shards:
            return self.length - self.length % self.num_replicas
        return self.length


__all__ = ["EpochSampler"]
