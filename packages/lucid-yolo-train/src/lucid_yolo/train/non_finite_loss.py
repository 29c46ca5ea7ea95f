"""What a non-finite loss does to a fit in fp32 or bf16: stop before the update, or skip it.

In fp16 the GradScaler already owns this case: a step whose gradients hold an inf or a NaN is not
applied and the scale backs off, natively and replayed alike (``update_step``). fp32 and bf16 have
no scaler, so one NaN would flow into the weights, the EMA and every checkpoint written after it.

:class:`NonFiniteLossGuard` looks at the loss of every micro-batch (device ops only, nothing
waits) and decides once per optimizer step:

* ``stop`` (the default) raises :class:`NonFiniteLossError`, which names the step and the loss
  terms that went non-finite. The weights, the optimizer and the EMA hold the last good step, and
  no checkpoint is written from a poisoned state (the last one written stays the last good one);
* ``skip`` leaves the update out, as GradScaler does in fp16: the step still counts (the schedule
  advances), the weights, optimizer state and EMA stay as they were, and the count is reported.

It decides at one of two moments:

* **now** (:meth:`~NonFiniteLossGuard.allows_update`, native updates): right before the update,
  with one host read. That read waits for the step's forward, loss and backward, so the host can
  never run ahead of the device.
* **late** (:meth:`~NonFiniteLossGuard.seal` then :meth:`~NonFiniteLossGuard.settle`, replayed
  updates): the step's flags leave for pinned host memory by an asynchronous copy, and the update
  runs at once, having backed up the state it writes (``update_step``). The flags are read when
  they are long computed, before anything uses or publishes the new state: before the next
  step's forward, before validation, before a checkpoint, at the end of training and on an
  exception. A non-finite step's update is then undone from the backup, which leaves exactly the
  state the check made now leaves, and the fit stops or skips as above. The copy is best started
  by :meth:`~NonFiniteLossGuard.observe` itself (``send``), right behind the loss: started at the
  update, it would queue behind the step's backward, and the next step's check would wait for
  that backward, so the host could not queue the next step while the device runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from lucid_yolo.train.exceptions import TrainConfigError, TrainError
from lucid_yolo.train.host_copy import HostCopy

NonFinitePolicy = Literal["stop", "skip"]
"""What a step whose loss is not finite does: ``stop`` the fit, or ``skip`` its update."""

NON_FINITE_POLICIES: tuple[NonFinitePolicy, ...] = ("stop", "skip")

SKIPPED_STEPS = "train/non_finite_skipped"
"""The metric logged at each validation under ``skip``: steps whose update was left out so far."""

TOTAL = "total"
"""The name of the summed loss among the terms a message lists."""


class NonFiniteLossError(TrainError):
    """A step's loss was NaN or infinite in fp32/bf16 and the policy is ``stop``."""


@dataclass
class _SealedStep:
    """One optimizer step's flags on their way to the host, read by :meth:`settle`."""

    step: int
    names: tuple[str, ...]
    flags: HostCopy
    """(T,) bool: each term's (and the total's) finiteness, copied without waiting."""


class NonFiniteLossGuard:
    """Check each step's loss before its update, or late; stop or skip when it is not finite.

    Args:
        policy: ``stop`` raises :class:`NonFiniteLossError`; ``skip`` leaves the update out and
            counts the step.
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

        guard.seal(step=7)  # or: at the update, which backs up what it writes and runs
        ...  # later, before the new state is used or published:
        guard.settle(undo=restore_backup)
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
        self.waits = 0
        """Late checks whose flags had not reached the host yet, so the host waited."""
        self._names: tuple[str, ...] = ()
        self._finite: Tensor | None = None
        self._sent: HostCopy | None = None
        self._sealed: _SealedStep | None = None

    def observe(self, total: Tensor, terms: dict[str, Tensor], *, send: bool = False) -> None:
        """Note whether one micro-batch's loss and each of its terms are finite.

        Device ops only: the flags are read once per step. The result is computed at once,
        because replayed outputs are borrowed and the next replay overwrites them. It runs
        eagerly on every micro-batch, so one ``isfinite`` over the stacked values (about five
        kernels by the CPU profiler: ``isfinite`` is composite) replaces one ``isfinite`` and
        one ``all`` per value (about 5·T + 1). A non-scalar value enters as ``(v * 0).sum()``,
        which is 0 when every element is finite and NaN otherwise (∞ · 0 and NaN · 0 are NaN).

        Args:
            total: the summed loss, any shape (a scalar in practice).
            terms: the named terms (scalars) that make it up.
            send: start the copy of the step's flags so far to the host now, in the device's
                order right behind this loss, for a step checked late (:meth:`seal`): the next
                step's check then waits for this forward at most, not for the backward and
                update queued after it. Each micro-batch's copy replaces the last one's.
        """
        names = (TOTAL, *terms)
        values = [total, *terms.values()]
        scalars = [v.detach() if v.dim() == 0 else (v.detach() * 0).sum() for v in values]
        finite = torch.isfinite(torch.stack(scalars))  # (T,) bool, one per value
        if self._finite is None or names != self._names:
            self._names, self._finite = names, finite
        else:
            self._finite = self._finite & finite
        self._sent = HostCopy(self._finite) if send else None

    def allows_update(self, step: int) -> bool:
        """Whether the update of optimizer step ``step`` may run, read now; resets for the next.

        Args:
            step: the 1-based optimizer step about to be applied (for the message).

        Returns:
            ``True`` when every loss since the last call was finite (or none was observed);
            ``False`` under ``skip`` when one was not.

        Raises:
            NonFiniteLossError: under ``stop``, when a loss was not finite.
        """
        finite, self._finite, self._sent = self._finite, None, None
        flags = None if finite is None else finite.tolist()
        return self._decide(step, self._names, flags, agree=True)

    @property
    def pending(self) -> bool:
        """Whether a sealed step awaits :meth:`settle`."""
        return self._sealed is not None

    def seal(self, step: int) -> None:
        """Close optimizer step ``step``'s observations and send its flags to the host.

        Nothing waits: on CUDA the flags go to pinned memory by an asynchronous copy
        (:class:`~lucid_yolo.train.host_copy.HostCopy`), the one the last :meth:`observe` sent,
        or one started here, behind whatever is queued by now. Call it right before an update
        that backs up the state it writes; the verdict is read by :meth:`settle`. A step with
        nothing observed seals nothing (and leaves an earlier sealed step pending).

        Args:
            step: the 1-based optimizer step about to be applied.
        """
        finite, sent, self._finite, self._sent = self._finite, self._sent, None, None
        if finite is None:
            return
        if self._sealed is not None:
            raise TrainError(
                f"step {step} was sealed while step {self._sealed.step} awaits its check; "
                "call settle() before the next step's forward"
            )
        flags = sent if sent is not None else HostCopy(finite)
        self._sealed = _SealedStep(step, self._names, flags)

    def settle(self, undo: Callable[[], None], *, failing: bool = False) -> None:
        """Read the sealed step's verdict; on a non-finite step ``undo`` its update, then decide.

        Waits only if the flags have not reached the host yet (counted in :attr:`waits`).

        Args:
            undo: puts back the state the sealed step's update changed; called before raising
                or counting.
            failing: the fit is already ending with an exception: decide on this process's
                flags alone (the other processes may never reach this point) and never raise.

        Raises:
            NonFiniteLossError: under ``stop`` when the sealed step was not finite, after
                ``undo`` (not when ``failing``).
        """
        sealed, self._sealed = self._sealed, None
        if sealed is None:
            return
        if not sealed.flags.ready():
            self.waits += 1
        try:
            flags = sealed.flags.read().tolist()
            self._decide(sealed.step, sealed.names, flags, agree=not failing, undo=undo)
        except NonFiniteLossError:
            if not failing:
                raise

    def _decide(
        self,
        step: int,
        names: tuple[str, ...],
        flags: list[bool] | None,
        *,
        agree: bool,
        undo: Callable[[], None] | None = None,
    ) -> bool:
        """Stop or skip unless every flag (of every process, with ``agree``) is ``True``."""
        here = flags is None or all(flags)
        everywhere = here if self.agree is None or not agree else self.agree(here)
        if everywhere:
            return True
        if undo is not None:
            undo()
        bad = [] if flags is None else [n for n, ok in zip(names, flags, strict=True) if not ok]
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
