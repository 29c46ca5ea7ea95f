"""The training DataLoader that a mid-epoch checkpoint can resume: it saves where it stopped.

Lightning (2.6) restores a fit mid-epoch only from a loader that has ``state_dict`` and
``load_state_dict``: it saves the loader's state in the checkpoint (``fit_loop`` →
``combined_loader``) and hands it back before the resumed epoch starts; with any other loader it
restarts the epoch's data from the first batch and warns. :class:`ResumableLoader` counts the
batches it has yielded in the current epoch (Lightning fetches a sized loader without prefetching,
so yielded = trained) and, on load, makes its :class:`EpochSampler` skip that many batches of the
same epoch's order. Samples are seeded by ``(seed, epoch, index)``, so the remaining batches are
bit for bit the ones the uninterrupted fit sees.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader
from typing_extensions import override

from lucid_yolo.train.data.augment.targets import Targets
from lucid_yolo.train.data.sampler import EpochSampler


class ResumableLoader(DataLoader[Targets]):
    """A DataLoader over an :class:`EpochSampler` whose position survives a checkpoint.

    Takes the arguments of ``DataLoader``; ``sampler`` must be an :class:`EpochSampler` and
    ``batch_size`` an int (the position is counted in whole batches).

    Raises:
        TypeError: another sampler, or no fixed batch size.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.sampler, EpochSampler) or self.batch_size is None:
            raise TypeError(
                f"ResumableLoader needs an EpochSampler and a batch size, got "
                f"{type(self.sampler).__name__} and batch_size={self.batch_size!r}"
            )
        self.epoch_sampler: EpochSampler = self.sampler
        self.batches_done = 0

    @override
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        self.batches_done = self.epoch_sampler.start // int(self.batch_size or 1)
        for batch in super().__iter__():
            self.batches_done += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        """The epoch being iterated and how many of its batches were yielded."""
        return {"epoch": self.epoch_sampler.epoch, "batches_done": self.batches_done}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        """Continue epoch ``state_dict["epoch"]`` after its first ``batches_done`` batches."""
        batches = int(state_dict["batches_done"])
        start = batches * int(self.batch_size or 1)
        self.epoch_sampler.resume_at(int(state_dict["epoch"]), min(start, len(self.epoch_sampler)))
        self.batches_done = batches


__all__ = ["ResumableLoader"]
