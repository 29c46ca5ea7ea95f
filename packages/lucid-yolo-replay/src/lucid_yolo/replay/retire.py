"""Typed retirement: why a recorder went native, warned once per reason and counted.

Retiring is the replay library's answer to anything it cannot honour bitwise: the step runs
eagerly, the reason is recorded with a detail string a user can act on, and the first occurrence of
each reason is warned (DESIGN.md §4 "Retire").
"""

from __future__ import annotations

import enum
import warnings
from collections import Counter
from dataclasses import dataclass

from lucid_yolo.replay.exceptions import ReplayRetiredWarning


class RetireReason(enum.StrEnum):
    """Why a recorder (or one of its signatures) stopped replaying.

    ``scope`` says whether the whole recorder retires or only the signature that hit the reason.
    """

    CAPTURE_FAILED = "capture-failed"
    """Warm-up or capture raised (host sync, new conv shape, OOM): that signature runs native."""
    FORWARD_ALTERED = "forward-altered"
    """A module's ``forward``, or a submodule itself, was replaced after the recorder was built:
    the graph would run the old code."""
    MODULE_HOOKS = "module-hooks"
    """A module (or global) forward/backward hook exists: replayed graphs never call hooks."""
    PARAMETER_HOOKS = "parameter-hooks"
    """A parameter carries tensor or post-accumulate-grad hooks that the replay cannot call."""
    PARAMETER_REPLACED = "parameter-replaced"
    """A parameter or buffer was replaced or moved: the graph would read freed memory."""
    SHARED_PARAMETER = "shared-parameter"
    """A parameter received gradient from inside and outside the region: summation order differs."""
    SIGNATURE_LIMIT = "signature-limit"
    """More distinct signatures than ``max_signatures``: the new one runs native."""
    UNSUPPORTED_INPUT = "unsupported-input"
    """An argument that is neither a tensor nor a Python scalar: that signature runs native."""
    UNSUPPORTED_MODULE = "unsupported-module"
    """A module needs a host sync inside its forward (e.g. ``BatchNorm(momentum=None)``) or
    communicates with other processes (``SyncBatchNorm``)."""
    PARITY_MISMATCH = "parity-mismatch"
    """The verifier's shadow native step gave different bits from the replayed step."""
    SHARED_INPUT = "shared-input"
    """A tensor input received gradient from inside and outside the region: summation order
    differs."""
    INTERLEAVED = "interleaved"
    """A forward came while a replayed forward of the same pool awaited its backward and was not
    nested above it (forward, forward, backward): that call runs native."""
    INPUTS_CHANGED = "inputs-changed"
    """The caller's named inputs differ from those the region was built for, or a call passed
    another tensor where the recording reads an earlier region's static output in place: that
    call runs native."""
    GRAD_LAYOUT = "grad-layout"
    """An output's incoming gradient had other strides than the native warm-up's, which the
    recorded backward reads with: its reductions would round differently."""
    BACKWARD_AUTOCAST = "backward-autocast"
    """A replayed backward was started under autocast; the recorded backward runs without it
    (as a backward started after the autocast region does), so its matrix products may round
    differently."""

    @property
    def permanent(self) -> bool:
        """Whether the reason retires the whole recorder rather than one signature or call."""
        return self not in _PER_SIGNATURE and self not in _PER_CALL

    @property
    def scope(self) -> str:
        """What runs native: ``"for good"``, ``"for this signature"`` or ``"for this call"``."""
        if self in _PER_CALL:
            return "for this call"
        return "for this signature" if self in _PER_SIGNATURE else "for good"


_PER_SIGNATURE = frozenset(
    {
        RetireReason.CAPTURE_FAILED,
        RetireReason.SIGNATURE_LIMIT,
        RetireReason.UNSUPPORTED_INPUT,
    }
)
_PER_CALL = frozenset({RetireReason.INTERLEAVED, RetireReason.INPUTS_CHANGED})


@dataclass(frozen=True)
class Retirement:
    """One retirement: the reason, a detail a user can act on, and the recorder's name."""

    reason: RetireReason
    detail: str
    owner: str

    def __str__(self) -> str:
        return f"{self.owner}: {self.reason.value}: {self.detail}"


class RetireLog:
    """Counts retirements by reason and warns the first time each reason occurs.

    Args:
        owner: name of the recorder, quoted in every warning.
    """

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.counts: Counter[RetireReason] = Counter()
        self.history: list[Retirement] = []

    def record(self, reason: RetireReason, detail: str) -> Retirement:
        """Count ``reason``; warn with ``detail`` if it is the first of its kind."""
        retirement = Retirement(reason, detail, self.owner)
        if not self.counts[reason]:
            warnings.warn(
                f"replay retired {reason.scope}: {retirement}", ReplayRetiredWarning, stacklevel=3
            )
        self.counts[reason] += 1
        self.history.append(retirement)
        return retirement


__all__ = ["RetireLog", "RetireReason", "Retirement"]
