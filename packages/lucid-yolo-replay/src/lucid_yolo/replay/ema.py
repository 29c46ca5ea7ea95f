"""Exponential moving average of a model's weights, written so the update can be replayed.

The decay changes every step (it ramps up with the update count), so it lives in a device tensor
that is filled before each update; the update itself is a fixed sequence of ``_foreach`` ops on
fixed tensors, identical natively and in the graph.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor, nn

from lucid_yolo.replay.exceptions import ReplayConfigError
from lucid_yolo.replay.pool import ReplayPool
from lucid_yolo.replay.telemetry import Telemetry
from lucid_yolo.replay.update import UpdateRecorder


class ModelEMA:
    """EMA of every floating-point parameter and buffer; other buffers are copied.

    ``ema = d * ema + (1 - d) * live`` with ``d = decay * (1 - exp(-updates / tau))``, so early
    updates follow the live weights closely.

    Args:
        model: the live model; the EMA holds a deep copy in eval mode without gradients.
        decay: asymptotic decay, in ``[0, 1)``.
        tau: ramp length in updates; ``0`` disables the ramp.
        graphed: replay the update from a graph after ``warmup_steps`` native updates.
        warmup_steps: native updates before recording.
        pool: shared memory pool; ``None`` makes a private one.

    Raises:
        ReplayConfigError: for a ``decay`` outside ``[0, 1)`` or a negative ``tau``.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        decay: float = 0.9999,
        tau: float = 2000.0,
        graphed: bool = True,
        warmup_steps: int = 1,
        pool: ReplayPool | None = None,
    ) -> None:
        if not 0.0 <= decay < 1.0:
            raise ReplayConfigError(f"decay={decay!r}: expected a value in [0, 1)")
        if tau < 0:
            raise ReplayConfigError(f"tau={tau!r}: expected 0 or more")
        self.module = copy.deepcopy(model).eval().requires_grad_(False)
        self.decay, self.tau, self.updates = decay, tau, 0
        live = dict(_state_tensors(model))
        ema = dict(_state_tensors(self.module))
        floats = [k for k, t in ema.items() if t.is_floating_point()]
        self._ema_floats = [ema[k] for k in floats]
        self._live_floats = [live[k] for k in floats]
        self._ema_other = [t for k, t in ema.items() if not t.is_floating_point()]
        self._live_other = [live[k] for k, t in ema.items() if not t.is_floating_point()]
        device = self._ema_floats[0].device if self._ema_floats else torch.device("cpu")
        self._keep = torch.zeros((), device=device)
        self._take = torch.zeros((), device=device)
        self.recorder = UpdateRecorder(
            self._apply,
            state=lambda: [*self._ema_floats, *self._ema_other],
            name="ema",
            warmup_steps=warmup_steps,
            pool=pool,
            enabled=graphed,
        )

    @property
    def telemetry(self) -> Telemetry:
        """Counters of the update recorder."""
        return self.recorder.telemetry

    def current_decay(self) -> float:
        """The decay the next update uses."""
        ramp = 1.0 - math.exp(-(self.updates + 1) / self.tau) if self.tau else 1.0
        return self.decay * ramp

    def update(self) -> None:
        """Blend the live weights into the EMA (natively or by replaying the graph)."""
        d = self.current_decay()
        # fill_ outside the graph: the graph reads these tensors, never a baked Python float.
        self._keep.fill_(d)
        self._take.fill_(1.0 - d)
        self.updates += 1
        self.recorder()

    def state_dict(self) -> dict[str, object]:
        """EMA weights and update count (for checkpoints and digests)."""
        return {"module": self.module.state_dict(), "updates": self.updates}

    def _apply(self) -> None:
        with torch.no_grad():
            if self._ema_floats:
                torch._foreach_mul_(self._ema_floats, self._keep)
                scaled = torch._foreach_mul(self._live_floats, self._take)
                torch._foreach_add_(self._ema_floats, scaled)
            for ema, live in zip(self._ema_other, self._live_other, strict=True):
                ema.copy_(live)


def _state_tensors(model: nn.Module) -> list[tuple[str, Tensor]]:
    return [*model.named_parameters(), *model.named_buffers()]


__all__ = ["ModelEMA"]
