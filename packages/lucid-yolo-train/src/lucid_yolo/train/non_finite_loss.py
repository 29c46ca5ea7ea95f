"""What a non-finite loss does to a fit in fp32 or bf16: stop before the update, or skip it.

In fp16 the GradScaler already owns this case: a step whose gradients hold an inf or a NaN is not
applied and the scale backs off, natively and replayed alike (``update_step``). fp32 and bf16 have
no scaler, so one NaN would flow into the weights, the EMA and every checkpoint written after it.

:class:`NonFiniteLossGuard` looks at the loss of every micro-batch (device ops only, nothing
waits) and decides once per optimizer step, right before the update, with one host sync. That is
the same place and the same cost as GradScaler's own check, and it comes before anything changes:

* ``stop`` (the default) raises :class:`NonFiniteLossError`, which names the step and the loss
  terms that went non-finite. The update is never applied, so the weights, the optimizer and the
  EMA hold the last good step, and no checkpoint is written from a poisoned state (the last one
  written stays the last good one);
* ``skip`` leaves the update out, as GradScaler does in fp16: the step still counts (the schedule
  advances), the weights, optimizer state and EMA stay as they were, and the count is reported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from lucid_yolo.train.exceptions import TrainConfigError, TrainError

NonFinitePolicy = Literal["stop", "skip"]
"""What a step whose loss is not finite does: ``stop`` the fit, or ``skip`` its update."""

NON_FINITE_POLICIES: tuple[NonFinitePolicy, ...] = ("stop", "skip")

SKIPPED_STEPS = "train/non_finite_skipped"
"""The metric logged at each validation under ``skip``: steps whose update was left out so far."""

TOTAL = "total"
"""The name of the summed loss among the terms a message lists."""


class NonFiniteLossError(TrainError):
    """A step's loss was NaN or infinite in fp32/bf16 and the policy is ``stop``."""


class NonFiniteLossGuard:
    """Check each step's loss before its update; stop or skip when it is not finite.

    Args:
        policy: ``stop`` raises :class:`NonFiniteLossError` before the update; ``skip`` leaves
            the update out and counts the step.
        agree: turns this process's verdict ("finite") into the verdict of every process
            (``True`` only if all say ``True``), so that data-parallel ranks, whose gradients are
            all-reduced, skip or stop together; ``None`` on one process.

    Raises:
        TrainConfigError: an unknown policy.

    Example::

        guard = NonFiniteLossGuard("skip")
        guard.observe(total, terms)  # every micro-batch, after the loss
        if not guard.allows_update(step=7):  # once per optimizer step, before the update
            ...  # leave the update out
    """

    def __init__(
        self, policy: NonFinitePolicy = "stop", agree: Callable[[bool], bool] | None = None
    ) -> None:
        if policy not in NON_FINITE_POLICIES:
            raise TrainConfigError(
                f"non_finite_loss={policy!r} is not a policy; use one of {NON_FINITE_POLICIES!r}"
            )
        self.policy: NonFinitePolicy = policy
        self.agree = agree
        self.skipped = 0
        """Steps whose update was left out, over the whole fit (a resume restores it)."""
        self._names: tuple[str, ...] = ()
        self._finite: Tensor | None = None

    def observe(self, total: Tensor, terms: dict[str, Tensor]) -> None:
        """Note whether one micro-batch's loss and each of its terms are finite.

        Device ops only: the flags are read once per step by :meth:`allows_update`. The result
        is computed at once, because replayed outputs are borrowed and the next replay
        overwrites them.

        Args:
            total: the summed loss, any shape (a scalar in practice).
            terms: the named terms (scalars) that make it up.
        """
        names = (TOTAL, *terms)
        values = [total, *terms.values()]
        # (T,) bool: whether every element of each value is finite
        finite = torch.stack([torch.isfinite(v.detach()).all() for v in values])
        if self._finite is None or names != self._names:
            self._names, self._finite = names, finite
        else:
            self._finite = self._finite & finite

    def allows_update(self, step: int) -> bool:
        """Whether the update of optimizer step ``step`` may run; resets for the next step.

        Args:
            step: the 1-based optimizer step about to be applied (for the message).

        Returns:
            ``True`` when every loss since the last call was finite (or none was observed);
            ``False`` under ``skip`` when one was not.

        Raises:
            NonFiniteLossError: under ``stop``, when a loss was not finite.
        """
        finite, self._finite = self._finite, None
        here = finite is None or bool(finite.all())
        everywhere = here if self.agree is None else self.agree(here)
        if everywhere:
            return True
        bad = (
            []
            if finite is None
            else [name for name, ok in zip(self._names, finite.tolist(), strict=True) if not ok]
        )
        where = f"non-finite terms: {', '.join(bad)}" if bad else "on another process"
        if self.policy == "stop":
            raise NonFiniteLossError(
                f"step {step}: the loss is not finite ({where}); the "
                "fit stopped before this step's update, so the weights, the EMA and the last "
                "checkpoint hold the last good step. Lower --model.lr0, check the data with "
                "`lucid-yolo data check`, or pass --model.non_finite_loss skip to leave such "
                "steps out"
            )
        self.skipped += 1
        return False


__all__ = [
    "NON_FINITE_POLICIES",
    "SKIPPED_STEPS",
    "NonFiniteLossError",
    "NonFiniteLossGuard",
    "NonFinitePolicy",
]
