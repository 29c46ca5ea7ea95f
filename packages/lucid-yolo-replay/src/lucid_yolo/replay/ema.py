"""Exponential moving average of a model's weights, written so the update can be replayed.

One implementation serves the standalone :class:`~lucid_yolo.replay.ReplayStep` and the trainer.
The decay ramps up with the update count (Polyak averaging with a warm-up, as the YOLO family
uses it)::

    d(n) = decay · (1 − exp(−n / tau))     n = updates so far, counting this one; tau = 0: no ramp
    ema ← ema · d(n) + live · (1 − d(n))   (averaged tensors)
    ema ← live                             (copied tensors)

Two choices change the bits, so they are explicit options rather than two classes:

- ``decay_on``: where ``d(n)`` is computed. ``"host"`` keeps the count as a CPU tensor and
  computes ``d`` in float64 Python before each update, then fills two float32 device scalars the
  blend reads (no host sync, and the blend alone is graphed). ``"device"`` keeps the count on the
  model's device and computes ``d`` in float32 inside the update, so the update is self-contained
  and can be recorded inside a larger graph (the trainer records it with the optimizer step).
- ``buffers``: ``"average"`` blends every floating-point tensor, BatchNorm statistics included;
  ``"copy"`` blends floating-point parameters only and copies buffers (BatchNorm statistics are
  already averages over batches).

Non-floating-point tensors (``num_batches_tracked``) are always copied. Either way the update is a
fixed sequence of ``_foreach`` ops on fixed tensors, identical natively and in a graph.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Literal

import torch
from torch import Tensor, nn

from lucid_yolo.replay._copies import copy_grouped
from lucid_yolo.replay.exceptions import ReplayConfigError
from lucid_yolo.replay.pool import ReplayPool
from lucid_yolo.replay.telemetry import Telemetry
from lucid_yolo.replay.update import UpdateRecorder

DecayOn = Literal["host", "device"]
BufferRule = Literal["average", "copy"]
_DECAY_ON: tuple[DecayOn, ...] = ("host", "device")
_BUFFER_RULES: tuple[BufferRule, ...] = ("average", "copy")


class ModelEMA:
    """Averaged copy of a model, updated in place after each optimizer step.

    Args:
        model: the live model; the EMA holds a deep copy in eval mode without gradients. Build it
            after moving the model to its device, or call :meth:`rebind` after a move.
        decay: asymptotic decay, in ``[0, 1]``.
        tau: ramp length in updates (``d`` reaches 63 % of ``decay`` after ``tau``); ``0`` disables
            the ramp.
        decay_on: ``"host"`` (float64 on the CPU) or ``"device"`` (float32 on the model's device);
            see the module docstring.
        buffers: ``"average"`` or ``"copy"`` floating-point buffers; see the module docstring.
        graphed: replay the update from its own graph after ``warmup_steps`` native updates.
            ``False`` when a caller records the update inside its own graph, or never records.
        warmup_steps: native updates before recording.
        pool: shared memory pool; ``None`` makes a private one.

    Attributes:
        module: the averaged network, for validation and checkpoints.
        updates: 0-dim int64 tensor, the updates applied so far (on the CPU for
            ``decay_on="host"``, on the model's device for ``"device"``).

    Raises:
        ReplayConfigError: for ``decay`` outside ``[0, 1]``, a negative ``tau``, or an unknown
            ``decay_on`` or ``buffers``.

    Example:
        >>> ema = ModelEMA(net, decay=0.9999, tau=2000.0)  # doctest: +SKIP
        >>> optimizer.step(); ema.update()  # doctest: +SKIP
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        decay: float = 0.9999,
        tau: float = 2000.0,
        decay_on: DecayOn = "host",
        buffers: BufferRule = "average",
        graphed: bool = True,
        warmup_steps: int = 1,
        pool: ReplayPool | None = None,
    ) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ReplayConfigError(f"decay={decay!r}: expected a value in [0, 1]")
        if tau < 0:
            raise ReplayConfigError(f"tau={tau!r}: expected 0 (no ramp) or more")
        if decay_on not in _DECAY_ON:
            raise ReplayConfigError(f"decay_on={decay_on!r}: expected one of {_DECAY_ON!r}")
        if buffers not in _BUFFER_RULES:
            raise ReplayConfigError(f"buffers={buffers!r}: expected one of {_BUFFER_RULES!r}")
        self.decay, self.tau = decay, tau
        self.decay_on: DecayOn = decay_on
        self.buffers: BufferRule = buffers
        self.live = model
        self.module = copy.deepcopy(model).eval().requires_grad_(False)
        self.updates = torch.zeros((), dtype=torch.int64)
        self.rebind()
        self.recorder = UpdateRecorder(
            self._apply,
            state=self.state_tensors,
            name="ema",
            warmup_steps=warmup_steps,
            pool=pool,
            enabled=graphed,
        )

    @property
    def telemetry(self) -> Telemetry:
        """Counters of the update recorder."""
        return self.recorder.telemetry

    def rebind(self) -> None:
        """Re-read the live and averaged tensors and follow the model to its device.

        ``Module.to`` keeps parameter objects but replaces every buffer, so after the models have
        moved (Lightning moves both with the trainer's module) the cached tensor lists would point
        at the old buffers. Call this once after such a move, before updating.

        Raises:
            ReplayConfigError: when the live model no longer has the averaged model's tensors.
        """
        live = _state_tensors(self.live)
        ema = _state_tensors(self.module)
        if list(live) != list(ema):
            raise ReplayConfigError(
                f"the live model has tensors {sorted(set(live) ^ set(ema))!r} that the EMA "
                "does not share: build the EMA from the model it averages"
            )
        parameters = {name for name, _ in self.module.named_parameters()}
        averaged = [
            name
            for name, t in ema.items()
            if t.is_floating_point() and (self.buffers == "average" or name in parameters)
        ]
        chosen = set(averaged)
        copied = [name for name in ema if name not in chosen]
        self._ema_averaged = [ema[name] for name in averaged]
        self._live_averaged = [live[name] for name in averaged]
        self._ema_copied = [ema[name] for name in copied]
        self._live_copied = [live[name] for name in copied]
        device = next(iter(ema.values()), torch.empty(0)).device
        if self.decay_on == "device":
            self.updates = self.updates.to(device)
        # decay_on="host": the blend reads d and 1 - d from these, filled before each update.
        self._keep = torch.zeros((), device=device)
        self._take = torch.zeros((), device=device)

    def state_tensors(self) -> list[Tensor]:
        """Every tensor an update writes (a graphed update snapshots them around its capture)."""
        counter = [self.updates] if self.decay_on == "device" else []
        return [*self._ema_averaged, *self._ema_copied, *counter]

    def update(self) -> None:
        """Blend the live weights into the average (natively or by replaying the graph)."""
        if self.decay_on == "host":
            n = int(self.updates) + 1
            d = self.decay * (1.0 - math.exp(-n / self.tau) if self.tau else 1.0)
            # fill_ outside the graph: the graph reads these tensors, never a baked Python float.
            self._keep.fill_(d)
            self._take.fill_(1.0 - d)
            self.updates.add_(1)
        self.recorder()

    def state_dict(self) -> dict[str, Any]:
        """Snapshot of the averaged weights and buffers (cloned) and of the update count."""
        weights = {k: v.detach().clone() for k, v in self.module.state_dict().items()}
        return {"module": weights, "updates": self.updates.detach().clone()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Copy saved weights and update count into the live tensors (addresses stay).

        Raises:
            RuntimeError: (from :meth:`torch.nn.Module.load_state_dict`) on missing, unexpected or
                mis-shaped entries.
        """
        self.module.load_state_dict(state_dict["module"])
        self.updates.copy_(torch.as_tensor(state_dict["updates"]))

    @torch.no_grad()
    def _apply(self) -> None:
        keep, take = self._keep, self._take
        if self.decay_on == "device":
            self.updates.add_(1)
            n = self.updates.to(torch.float32)
            keep = self.decay * (1.0 - torch.exp(n / -self.tau))
            take = 1.0 - keep
        if self._ema_averaged:
            torch._foreach_mul_(self._ema_averaged, keep)
            torch._foreach_add_(
                self._ema_averaged, list(torch._foreach_mul(self._live_averaged, take))
            )
        copy_grouped(self._ema_copied, self._live_copied)


def _state_tensors(model: nn.Module) -> dict[str, Tensor]:
    return dict([*model.named_parameters(), *model.named_buffers()])


__all__ = ["BufferRule", "DecayOn", "ModelEMA"]
