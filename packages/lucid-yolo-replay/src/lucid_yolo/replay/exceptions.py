"""Typed exceptions and warnings of :mod:`lucid_yolo.replay`.

A recorder never raises for a step it cannot honour: it *retires* to native execution and warns
(:class:`ReplayRetiredWarning`). Exceptions are kept for misuse that no fallback can fix, such as a
bad argument, for the internal capture failure that the recorder turns into a retirement, and for
the one state no retirement can make safe (:class:`PoolLeakError`).
"""

from __future__ import annotations


class ReplayError(Exception):
    """Base class of every error raised by :mod:`lucid_yolo.replay`."""


class ReplayConfigError(ReplayError, ValueError):
    """An argument or region description that the replay library cannot work with."""


class CaptureError(ReplayError):
    """A warm-up or capture failed; ``op`` names the offending operator when it is known.

    The recorder catches it, restores the state it snapshotted and retires the signature with
    reason ``capture-failed``; user code only sees it through the warning and the telemetry.
    """

    def __init__(self, message: str, op: str | None = None) -> None:
        super().__init__(message)
        self.op = op


class PoolLeakError(ReplayError):
    """Work that borrowed the shared graph pool's free blocks left a block alive there: a
    recording's warm-up, or eager work lent the blocks between replayed steps
    (:class:`~lucid_yolo.replay.ScratchLoan`).

    The block sits in the scratch of graphs captured earlier, which overwrite it when they
    replay, and nothing can move it: retiring would leave native code reading it. So the
    recorder lets this error stop the step instead of retiring
    (docs/replay-invariants.md, invariants 25 and 27).
    """


class FreedActivationsError(ReplayError, RuntimeError):
    """A second backward through one replayed forward of a recording that frees its activations
    in its backward (``RegionRecorder(frees_activations=True)``): they are gone, as a native
    graph's saved tensors are after ``backward()`` without ``retain_graph=True``, and the
    backward graph would read memory its own scratch has overwritten."""


class ReplayRetiredWarning(UserWarning):
    """A recorder stopped replaying (for one signature or for good) and runs native instead."""


__all__ = [
    "CaptureError",
    "FreedActivationsError",
    "PoolLeakError",
    "ReplayConfigError",
    "ReplayError",
    "ReplayRetiredWarning",
]
