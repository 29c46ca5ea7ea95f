"""A point on a step's timeline: a CUDA event on the current stream, or the host's clock.

Why: timing a step's parts on the GPU must not wait for the GPU. An event is recorded behind the
queued work and read only once it has completed (:meth:`DeviceClock.done`, or after a
synchronisation the caller makes anyway), so the timing adds no host synchronisation to the step.
:class:`~lucid_yolo.train.callbacks.phase_timer.PhaseTimer` times the step's phases with it, and
``tools/probe_fit_gap.py`` the steps and the gaps between them.
"""

from __future__ import annotations

import time

import torch


class DeviceClock:
    """Now, on the device's timeline when ``cuda`` (an event), else on the host's.

    Args:
        cuda: record a CUDA event on the current stream instead of reading the host's clock.
    """

    def __init__(self, cuda: bool) -> None:
        self._event: torch.cuda.Event | None = None
        self._host = 0.0
        if cuda:
            self._event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            self._event.record()
        else:
            self._host = time.perf_counter()

    def done(self) -> bool:
        """Whether :meth:`ms_since` can read this point without waiting."""
        return self._event is None or bool(self._event.query())  # type: ignore[no-untyped-call]

    def ms_since(self, earlier: DeviceClock) -> float:
        """Milliseconds from ``earlier`` to this point (both of one kind)."""
        if self._event is not None and earlier._event is not None:
            return float(earlier._event.elapsed_time(self._event))
        return (self._host - earlier._host) * 1000.0


__all__ = ["DeviceClock"]
