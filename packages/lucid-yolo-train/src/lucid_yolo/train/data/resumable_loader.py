"""The training DataLoader that a mid-epoch checkpoint can resume: it saves where it stopped.

Lightning (2.6) restores a fit mid-epoch only from a loader that has ``state_dict`` and
``load_state_dict``: it saves the loader's state in the checkpoint (``fit_loop`` →
``combined_loader``) and hands it back before the resumed epoch starts; with any other loader it
restarts the epoch's data from the first batch and warns. :class:`ResumableLoader` counts the
batches it has yielded in the current epoch (Lightning fetches a sized loader without prefetching,
so yielded = trained) and, on load, makes its :class:`EpochSampler` skip that many batches of the
same epoch's order. Samples are seeded by ``(seed, epoch, index)``, so the remaining batches are
bit for bit the ones the uninterrupted fit sees.

With worker processes it also keeps loading across epoch ends (issue 11, epoch turnover): it
iterates one DataLoader over :class:`~lucid_yolo.train.data.epoch_batches.EpochBatches`, which
runs on into the next epoch, and hands Lightning each epoch's batches from that one stream. The
workers then prepare the next epoch's first batches while this epoch's last steps and its
validation run. An iteration that does not continue where the stream stands (a resume, an epoch
left early, another epoch set) starts a new stream there.

The fit's first stream can start before the fit iterates (issue 11, start-up):
:meth:`ResumableLoader.start_stream` forks the workers at the position the next iteration begins
from, so they decode the first batches while the model summary and the sanity check run; that
iteration takes the stream over. The batches and the random draws are those of a stream started
by the iteration itself: the same positions, and the one base seed of the workers drawn from the
loader's own generator. What it costs: up to ``num_workers × prefetch_factor`` batches wait in
memory (shared, and pinned when the loader pins) until training begins.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader
from typing_extensions import override

from lucid_yolo.train.data.augment.targets import Targets
from lucid_yolo.train.data.epoch_batches import BatchStream, StreamedLoader
from lucid_yolo.train.data.sampler import EpochSampler


class ResumableLoader(StreamedLoader, DataLoader[Targets]):
    """A DataLoader over an :class:`EpochSampler` whose position survives a checkpoint.

    Takes the arguments of ``DataLoader`` (options by keyword); ``sampler`` must be an
    :class:`EpochSampler` and ``batch_size`` an int (the position is counted in whole batches).
    The cross-epoch stream is a ``DataLoader`` built with the same options but the batching ones.

    Raises:
        TypeError: another sampler, or no fixed batch size.
    """

    def __init__(self, dataset: Any, **options: Any) -> None:
        super().__init__(dataset, **options)
        if not isinstance(self.sampler, EpochSampler) or self.batch_size is None:
            raise TypeError(
                f"ResumableLoader needs an EpochSampler and a batch size, got "
                f"{type(self.sampler).__name__} and batch_size={self.batch_size!r}"
            )
        self.epoch_sampler: EpochSampler = self.sampler
        self.batches_done = 0
        self._stream = BatchStream(
            dataset, self.epoch_sampler, self.batch_size, options, drop_last=self.drop_last
        )

    @override
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        epoch = self.epoch_sampler.epoch
        first = self._first_batch
        self.batches_done = first
        in_process: Iterator[Any] | None = None
        if self.num_workers == 0:
            in_process = super().__iter__()
        else:
            self.epoch_sampler.start = 0  # the stream starts at `first` itself
        for index in range(first, len(self)):
            # asked by position, not held: the stream stays its workers' only holder
            batch = self._stream.batch(epoch, index) if in_process is None else next(in_process)
            self.batches_done += 1
            yield batch

    def start_stream(self) -> None:
        """Start the workers where the next iteration begins, so its first batches load now.

        The stream starts at the sampler's epoch, after the batches a restored position
        (:meth:`load_state_dict`) skips. The next iteration takes it over when it begins there;
        one that begins elsewhere (another epoch set meanwhile) shuts it down and starts a new
        stream where it begins, as after an epoch left early: the batches are still the right
        ones, the started workers' loading is lost, and the new stream's workers get the next
        base seed of the loader's generator. Without workers nothing starts.
        """
        if self.num_workers > 0:
            self._stream.start(self.epoch_sampler.epoch, self._first_batch)

    @property
    def _first_batch(self) -> int:
        """The batch of the sampler's epoch the next iteration begins with (a resume skips).

        Rounded up: a position after an epoch's short last batch is the epoch's length, not a
        multiple of the batch size, and it stands after that batch, at the next epoch's start.
        """
        return -(-self.epoch_sampler.start // int(self.batch_size or 1))

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
