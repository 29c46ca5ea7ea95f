"""Lightning's ``Trainer``, with the checkpoints of one moment of a fit written from one dump.

``lucid-yolo fit`` keeps two checkpoints, ``best.ckpt`` (when the fitness improved) and
``last.ckpt``, through two ``ModelCheckpoint`` callbacks that each call
``Trainer.save_checkpoint`` at the end of validation. Lightning then dumps the whole state twice
(every module, optimizer and loop state dict, the hooks) and the checkpoint IO copies every
tensor twice, for two files of the same step. On the H200 the two saves held the training
thread 0.42-0.48 s of every epoch of the detect batch-16 fit (session 9,
``tools/probe_fit_gap.py``), as much as before their writes moved to a background thread.

:class:`YoloTrainer` dumps once per moment: a save whose moment is the previous save's (a fit
under way, the same step and the same progress of every loop, so that no batch, validation or
epoch end ran between them) has the :class:`~lucid_yolo.train.callbacks.AtomicCheckpointIO`
write the previous save's checkpoint again, with only the callbacks' states read anew
(``ModelCheckpoint`` records the file it writes there). The file holds what a dump of its own
would hold; when it is the same content as the previous file (``best`` and ``last`` after the
first epoch), it is a hard link of that file.

Example:
    >>> trainer = YoloTrainer(plugins=[AtomicCheckpointIO()])  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn, TrainerStatus
from typing_extensions import override

from lucid_yolo.train.callbacks.atomic_checkpoint_io import AtomicCheckpointIO
from lucid_yolo.train.checkpoint_snapshot import same_content


class YoloTrainer(pl.Trainer):
    """``pl.Trainer`` whose saves of one moment of a fit share one dump (module docstring).

    Everything else is Lightning's: the constructor, the loops, the hooks. With another
    checkpoint IO than :class:`~lucid_yolo.train.callbacks.AtomicCheckpointIO`, or with
    ``storage_options``, every save dumps, as Lightning's does.
    """

    callbacks: list[Callback]  # Lightning's, set by its constructor
    # the last save's moment and the IO's number for it, while a fit runs (no constructor of
    # its own: LightningCLI reads the trainer's options from Lightning's)
    _saved: tuple[list[Any], int | None] | None = None

    @override
    def save_checkpoint(
        self, filepath: _PATH, weights_only: bool | None = None, storage_options: Any | None = None
    ) -> None:
        """Save the fit's state to ``filepath``: dumped, or as the previous save's checkpoint
        when this save's moment is that save's.

        Raises:
            AttributeError: no model attached (Lightning's error).
        """
        io = self.strategy.checkpoint_io
        if not isinstance(io, AtomicCheckpointIO) or storage_options is not None:
            super().save_checkpoint(filepath, weights_only, storage_options)
            return
        moment = self._moment(weights_only)
        saved = self._saved
        if saved is not None and saved[1] == io.last_save and same_content(saved[0], moment):
            if self.strategy.is_global_zero:
                io.save_again(
                    filepath, {} if weights_only else {"callbacks": self._callback_states()}
                )
            self.strategy.barrier("Trainer.save_checkpoint")
            return
        super().save_checkpoint(filepath, weights_only, storage_options)
        self._saved = (moment, io.last_save) if self._fitting() else None

    def _moment(self, weights_only: bool | None) -> list[Any]:
        """What tells two saves' moments apart: the step and every loop's progress (a batch,
        a validation batch, an epoch's end move them), and what the save holds."""
        loops = (self.fit_loop, self.validate_loop, self.test_loop, self.predict_loop)
        return [
            bool(weights_only),
            self._fitting(),
            self.global_step,
            [loop.state_dict() for loop in loops],
        ]

    def _fitting(self) -> bool:
        """Whether a fit is running: outside one, nothing but a step tells two moments apart
        (a caller may change the weights between two saves), so every save dumps."""
        return self.state.fn == TrainerFn.FITTING and self.state.status == TrainerStatus.RUNNING

    def _callback_states(self) -> dict[str, Any]:
        """The callbacks' states, as Lightning's dump gathers them (keyed by ``state_key``)."""
        states = {}
        for callback in self.callbacks:
            state = callback.state_dict()
            if state:
                states[callback.state_key] = state
        return states


__all__ = ["YoloTrainer"]
