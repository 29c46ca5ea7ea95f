"""Exponential moving average of a model's weights, with YOLO's warm-up ramp on the decay.

Validation and checkpoints use the averaged weights: they are smoother than the last iterate and
typically score higher. Early in training the weights move fast and an average with decay 0.9999
would remember the random initialisation for thousands of steps, so the decay ramps up::

    d(n) = decay · (1 − exp(−n / tau))        n = number of updates so far, counting this one
    ema ← ema · d(n) + model · (1 − d(n))     (floating-point parameters)
    ema_buffer ← model_buffer                 (all buffers, e.g. BatchNorm running statistics)

BatchNorm running statistics are already averages over batches, so they are copied rather than
averaged a second time; integer buffers (``num_batches_tracked``) can only be copied.

:meth:`ModelEMA.update` must run once per optimiser step, not per micro-batch: under gradient
accumulation the weights only change on the last micro-batch, and updating on every micro-batch
would both over-weight unchanged weights and advance the ramp too fast. The trainer runs it right
after each applied optimiser update, in the same step (:mod:`lucid_yolo.train.update_step`), so a
step that GradScaler skips blends nothing either.

Graph safety: the update count is a 0-dim int64 device tensor, the decay is computed from it on the
device, and the blend uses foreach ``mul_``/``add_``/``copy_`` on fixed tensor lists, so the native
update is the op sequence a CUDA-graph replay records. ``decay`` and ``tau`` are constants fixed at
construction (a graph bakes them).
"""

import copy
from typing import Any

import torch
from torch import Tensor, nn

from lucid_yolo.train.optim.errors import OptimizerConfigError, OptimizerStateError

__all__ = ["ModelEMA"]


class ModelEMA:
    """Averaged copy of a model, updated in place once per optimiser step.

    Args:
        model: the trained network; it is deep-copied (on its current device, in eval mode, without
            gradients). Build the EMA after moving the model to its device.
        decay: asymptotic decay ``d`` of the average.
        tau: ramp length of the decay in updates (the decay reaches 63 % of ``d`` after ``tau``).

    Attributes:
        module: the averaged network, for validation and checkpoints.
        updates: 0-dim int64 device tensor, the number of updates applied so far.

    Raises:
        OptimizerConfigError: when ``decay`` is outside ``[0, 1]`` or ``tau`` is not positive.
    """

    def __init__(self, model: nn.Module, *, decay: float = 0.9999, tau: float = 2000.0) -> None:
        if not 0.0 <= decay <= 1.0:
            raise OptimizerConfigError(f"decay must be in [0, 1], got {decay!r}")
        if not tau > 0.0:
            raise OptimizerConfigError(f"tau must be > 0, got {tau!r}")
        self.decay = decay
        self.tau = tau
        self.module = copy.deepcopy(model).eval().requires_grad_(False)
        self.updates = torch.zeros((), dtype=torch.int64)
        self.rebind()

    def rebind(self) -> None:
        """Re-read the averaged module's tensors and follow it to its device.

        ``Module.to`` keeps parameter objects but replaces every buffer, so after the averaged
        module has moved (Lightning moves it with the trainer's module) the cached buffer list
        would point at the old tensors. Call this once after such a move, before updating.
        """
        params: list[Tensor] = list(self.module.parameters())
        self._float_params = [p for p in params if p.is_floating_point()]
        self._other_params = [p for p in params if not p.is_floating_point()]
        self._buffers: list[Tensor] = list(self.module.buffers())
        device = next(iter(self.module.parameters()), torch.empty(0)).device
        self.updates = self.updates.to(device)

    def state_tensors(self) -> list[Tensor]:
        """Every tensor :meth:`update` writes: averaged weights, buffers and the update count.

        A graphed update snapshots them around its capture (the capture must leave no trace).
        """
        return [*self._float_params, *self._other_params, *self._buffers, self.updates]

    def current_decay(self) -> Tensor:
        """``d(updates)`` as a 0-dim float32 device tensor (the decay of the last update)."""
        n = self.updates.to(torch.float32)
        return self.decay * (1.0 - torch.exp(n / -self.tau))

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Blend the current weights of ``model`` into the average and copy its buffers.

        Args:
            model: the trained network, with the same structure as at construction.

        Raises:
            OptimizerStateError: when ``model`` has another number of parameters or buffers.
        """
        float_params, other_params, buffers = self._live_tensors(model)
        self.updates.add_(1)
        d = self.current_decay()
        torch._foreach_mul_(self._float_params, d)
        torch._foreach_add_(self._float_params, list(torch._foreach_mul(float_params, 1.0 - d)))
        for average, live in zip(self._other_params, other_params, strict=True):
            average.copy_(live)
        for average, live in zip(self._buffers, buffers, strict=True):
            average.copy_(live)

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

    def _live_tensors(self, model: nn.Module) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
        params: list[Tensor] = list(model.parameters())
        buffers: list[Tensor] = list(model.buffers())
        expected = len(self._float_params) + len(self._other_params)
        if len(params) != expected or len(buffers) != len(self._buffers):
            raise OptimizerStateError(
                f"model has {len(params)!r} parameters and {len(buffers)!r} buffers, the EMA "
                f"{expected!r} and {len(self._buffers)!r}; update the EMA with the model it "
                "was built from"
            )
        floats = [p for p in params if p.is_floating_point()]
        others = [p for p in params if not p.is_floating_point()]
        return floats, others, buffers
