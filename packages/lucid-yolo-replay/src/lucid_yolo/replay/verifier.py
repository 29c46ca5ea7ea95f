"""The verifier: a shadow native step whose digest must equal the replayed step's.

Every ``every``-th optimizer step the step helper snapshots the whole training state, runs the
step replayed, digests, restores the snapshot and runs the same micro-batches natively. Equal
digests prove the replay bitwise on that step; a difference retires every recorder with
``parity-mismatch`` naming the first differing tensor, and training continues from the native
result, so a mismatch never reaches the weights.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from lucid_yolo.replay._state import StateSnapshot
from lucid_yolo.replay.exceptions import ReplayConfigError


class TrainingSnapshot:
    """In-place restorable copy of model, gradients, optimizer/scaler/EMA tensors and RNG.

    Args:
        model: the trained module (parameters, buffers and ``.grad``).
        tensors: further state tensors (optimizer state, scaler scale and growth tracker, EMA).
    """

    def __init__(self, model: nn.Module, tensors: Sequence[Tensor]) -> None:
        self._params = list(model.parameters())
        self._grads = [None if p.grad is None else p.grad.detach().clone() for p in self._params]
        live = [*self._params, *model.buffers(), *tensors]
        self._state = StateSnapshot(live, [t.device for t in live])

    def restore(self) -> None:
        """Put every value back (gradients as fresh copies, or ``None``)."""
        self._state.restore()
        for p, grad in zip(self._params, self._grads, strict=True):
            p.grad = None if grad is None else grad.clone()


class Verifier:
    """Decides which optimizer steps are verified.

    Args:
        every: verify every ``every``-th optimizer step; ``0`` never verifies.

    Raises:
        ReplayConfigError: for a negative ``every``.
    """

    def __init__(self, every: int) -> None:
        if every < 0:
            raise ReplayConfigError(f"verify_every={every!r}: expected 0 (off) or a positive int")
        self.every = every
        self.verified = 0
        self.mismatches = 0

    def due(self, steps_done: int) -> bool:
        """Whether the optimizer step after ``steps_done`` completed ones is verified."""
        return self.every > 0 and steps_done > 0 and steps_done % self.every == 0


def state_tensors(obj: object) -> list[Tensor]:
    """Every tensor reachable from ``obj`` through dicts, lists and tuples (optimizer state)."""
    if isinstance(obj, Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in state_tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in state_tensors(v)]
    return []


def scaler_tensors(scaler: torch.amp.GradScaler | None) -> list[Tensor]:
    """The GradScaler's device state (scale and growth tracker), once it has been created."""
    if scaler is None:
        return []
    return [
        t
        for t in (getattr(scaler, "_scale", None), getattr(scaler, "_growth_tracker", None))
        if isinstance(t, Tensor)
    ]


__all__ = ["TrainingSnapshot", "Verifier", "scaler_tensors", "state_tensors"]
