"""A device copy of everything an optimizer update writes, taken as the update's first act.

The non-finite loss guard reads a replayed step's verdict late (:mod:`lucid_yolo.train.
non_finite_loss`), after the update has already run, so that the host never waits for the
device inside the step. A non-finite step's update must then be undone to the exact bits it
started from: the parameters, MuSGD's momentum buffers, the EMA's weights, buffers and update
count. :class:`UpdateBackup` copies them on the device right before the update, in a few batched
copies (one per dtype); recorded in the update's graph, the copy is one more part of that graph,
with no launch from Python. It costs one more copy of that state in memory.

The schedule writes the param groups' hyperparameters (learning rates, momentum) after each
update, also before the verdict is read. A ``skip`` keeps that (the step counts), a ``stop``
puts them back too, as if the step had never begun.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from lucid_yolo.replay import copy_grouped


class UpdateBackup:
    """The update's state and the schedule's tensors as they were before the last update.

    Args:
        state: every tensor the update writes, in a fixed order.
        schedule: the tensors the schedule writes between updates (the hyperparameters).
    """

    def __init__(
        self, state: Callable[[], Sequence[Tensor]], schedule: Callable[[], Sequence[Tensor]]
    ) -> None:
        self.state = state
        self.schedule = schedule
        self._live: list[Tensor] = []
        self._copies: list[Tensor] = []
        self._schedule_from = 0

    @property
    def nbytes(self) -> int:
        """Bytes the copies hold."""
        return sum(t.nbytes for t in self._copies)

    @torch.no_grad()
    def save(self) -> None:
        """Copy the live tensors into the backup (allocated at the first call, or anew when the
        live tensors were replaced, e.g. after the model moved)."""
        state = list(self.state())
        live = [*state, *self.schedule()]
        if len(live) != len(self._live) or any(
            a is not b for a, b in zip(live, self._live, strict=True)
        ):
            self._live = live
            self._copies = [torch.empty_like(t) for t in live]
            self._schedule_from = len(state)
        copy_grouped(self._copies, live)

    @torch.no_grad()
    def restore(self, *, schedule: bool) -> None:
        """Write the backup back into the live tensors.

        Args:
            schedule: also put the hyperparameters back (a ``stop``; a ``skip`` keeps the
                schedule's progress).
        """
        end = len(self._live) if schedule else self._schedule_from
        copy_grouped(self._live[:end], self._copies[:end])


__all__ = ["UpdateBackup"]
