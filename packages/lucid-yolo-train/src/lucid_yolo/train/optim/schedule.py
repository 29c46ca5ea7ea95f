"""YOLO-style learning-rate and momentum schedule: linear warm-up, then linear decay.

Warm-up (the first ``W`` optimiser steps) ramps every group's learning rate linearly from its start
value to the decayed target, and the momentum from ``warmup_momentum`` up to its base value. Bias
groups start high (``warmup_bias_lr``, 0.1 by default) and come down, other groups start from 0: a
large bias step early lets the detection head's class/box biases settle while the weights are still
moving slowly. After warm-up the learning rate decays linearly from ``lr0`` to ``lrf·lr0``.

With ``T = epochs·steps_per_epoch`` optimiser steps and ``t`` the number of steps already taken,
the values used by the next optimiser step are::

    f(t)     = 1 − (1 − lrf) · t / T                       (decay factor, f(0) = 1, f(T) = lrf)
    lr_j(t)  = start_j + (lr0_j · f(t) − start_j) · t / W  for t < W, else lr0_j · f(t)
    μ(t)     = μ_w + (μ0 − μ_w) · t / W                    for t < W, else μ0

``start_j`` is ``warmup_bias_lr`` for groups whose ``"kind"`` is ``"bias"`` (see
:func:`~lucid_yolo.train.optim.param_groups.param_groups`) and 0 otherwise. This is YOLO's linear
lambda ``(1 − e/E)(1 − lrf) + lrf`` evaluated at the fractional epoch ``e = t / steps_per_epoch``
rather than at the integer epoch, so the learning rate moves every step instead of in stairs; the
two agree at epoch boundaries. ``W = max(round(warmup_epochs · steps_per_epoch),
min_warmup_steps)`` (YOLO uses at least 100 warm-up iterations), capped at ``T``; ``warmup_steps``
overrides it.

The schedule is a plain object, not a :class:`torch.optim.lr_scheduler.LRScheduler`: that base
class rebinds ``group["lr"]`` to Python floats on some torch versions and knows nothing of momentum,
while a graph-replayed update must read both from the device tensors it was recorded with. Values
are written in place (``tensor.fill_``) when the group holds tensors (MuSGD), else assigned.

Example (Lightning, stepping once per optimiser step, so gradient accumulation is honoured)::

    def configure_optimizers(self):
        opt = MuSGD(param_groups(self.net, weight_decay=5e-4), lr=0.01)
        steps = self.trainer.estimated_stepping_batches // self.trainer.max_epochs
        sched = WarmupLinearSchedule(opt, epochs=self.trainer.max_epochs, steps_per_epoch=steps)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def lr_scheduler_step(self, scheduler, metric):
        scheduler.step()
"""

from typing import Any

from torch import Tensor
from torch.optim import Optimizer

from lucid_yolo.train.optim.errors import OptimizerConfigError, OptimizerStateError
from lucid_yolo.train.optim.param_groups import BIAS

__all__ = ["WarmupLinearSchedule"]


def _write(group: dict[str, Any], key: str, value: float) -> None:
    """Set ``group[key]`` in place when it is a tensor (graph-visible), else rebind it."""
    current = group[key]
    if isinstance(current, Tensor):
        current.fill_(value)
    else:
        group[key] = value


class WarmupLinearSchedule:
    """Writes warm-up then linearly decaying lr and momentum into an optimiser's groups.

    The constructor writes the values of step 0; call :meth:`step` after every optimiser step.

    Args:
        optimizer: optimiser whose groups hold ``lr`` and ``momentum`` (floats or 0-dim tensors);
            their values at construction are the base ``lr0`` and ``μ0``.
        epochs: training epochs ``E``.
        steps_per_epoch: optimiser steps per epoch (after gradient accumulation).
        lrf: final learning rate as a fraction of ``lr0``.
        warmup_epochs: warm-up length in epochs (may be fractional).
        warmup_steps: warm-up length in optimiser steps; overrides ``warmup_epochs`` and
            ``min_warmup_steps`` when given.
        min_warmup_steps: lower bound on the warm-up derived from ``warmup_epochs``.
        warmup_bias_lr: start lr of ``"bias"`` groups.
        warmup_momentum: start momentum of every group.

    Raises:
        OptimizerConfigError: for non-positive ``epochs``/``steps_per_epoch``, a negative warm-up,
            ``lrf`` outside ``[0, 1]``, or a group without ``lr`` or ``momentum``.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        *,
        epochs: int,
        steps_per_epoch: int,
        lrf: float = 0.01,
        warmup_epochs: float = 3.0,
        warmup_steps: int | None = None,
        min_warmup_steps: int = 100,
        warmup_bias_lr: float = 0.1,
        warmup_momentum: float = 0.8,
    ) -> None:
        if epochs < 1 or steps_per_epoch < 1:
            raise OptimizerConfigError(
                f"epochs and steps_per_epoch must be >= 1, got {epochs!r} and {steps_per_epoch!r}"
            )
        if not 0.0 <= lrf <= 1.0:
            raise OptimizerConfigError(f"lrf must be in [0, 1], got {lrf!r}")
        if not (warmup_epochs >= 0.0 and min_warmup_steps >= 0 and (warmup_steps or 0) >= 0):
            raise OptimizerConfigError(
                f"warm-up lengths must be >= 0, got warmup_epochs={warmup_epochs!r}, "
                f"warmup_steps={warmup_steps!r}, min_warmup_steps={min_warmup_steps!r}"
            )
        for index, group in enumerate(optimizer.param_groups):
            missing = [k for k in ("lr", "momentum") if k not in group]
            if missing:
                raise OptimizerConfigError(
                    f"param group {index} has no {missing!r}; use an optimiser with momentum "
                    "(MuSGD or SGD)"
                )
        self.optimizer = optimizer
        self.total_steps = epochs * steps_per_epoch
        if warmup_steps is None:
            warmup_steps = max(round(warmup_epochs * steps_per_epoch), min_warmup_steps)
        self.warmup_steps = min(warmup_steps, self.total_steps)
        self.lrf = lrf
        self.warmup_bias_lr = warmup_bias_lr
        self.warmup_momentum = warmup_momentum
        self.base_lrs = [float(group["lr"]) for group in optimizer.param_groups]
        self.base_momenta = [float(group["momentum"]) for group in optimizer.param_groups]
        self.optimizer_steps = 0
        self._write_values()

    def lrs(self, steps_taken: int) -> list[float]:
        """Learning rate of each group for the optimiser step after ``steps_taken`` steps.

        Steps beyond the end of training keep the final values.
        """
        t = min(steps_taken, self.total_steps)
        decay = 1.0 - (1.0 - self.lrf) * t / self.total_steps
        targets = [base * decay for base in self.base_lrs]
        if t >= self.warmup_steps:
            return targets
        fraction = t / self.warmup_steps
        starts = [
            self.warmup_bias_lr if group.get("kind") == BIAS else 0.0
            for group in self.optimizer.param_groups
        ]
        return [s + (target - s) * fraction for s, target in zip(starts, targets, strict=True)]

    def momenta(self, steps_taken: int) -> list[float]:
        """Momentum of each group for the optimiser step after ``steps_taken`` steps."""
        t = min(steps_taken, self.total_steps)
        if t >= self.warmup_steps:
            return list(self.base_momenta)
        fraction = t / self.warmup_steps
        w = self.warmup_momentum
        return [w + (base - w) * fraction for base in self.base_momenta]

    def step(self) -> None:
        """Record one optimiser step and write the values for the next one."""
        self.optimizer_steps += 1
        self._write_values()

    def state_dict(self) -> dict[str, Any]:
        """Step count and base values (the configuration comes from the constructor)."""
        return {
            "optimizer_steps": self.optimizer_steps,
            "base_lrs": list(self.base_lrs),
            "base_momenta": list(self.base_momenta),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the step count and base values, then write the current values into the groups.

        Raises:
            OptimizerStateError: when the saved groups do not match the optimiser's.
        """
        groups = len(self.optimizer.param_groups)
        saved = len(state_dict["base_lrs"])
        if saved != groups or len(state_dict["base_momenta"]) != groups:
            raise OptimizerStateError(
                f"schedule state has {saved!r} groups but the optimiser has {groups!r}; "
                "load the state saved with the same parameter grouping"
            )
        self.optimizer_steps = int(state_dict["optimizer_steps"])
        self.base_lrs = [float(v) for v in state_dict["base_lrs"]]
        self.base_momenta = [float(v) for v in state_dict["base_momenta"]]
        self._write_values()

    def _write_values(self) -> None:
        lrs = self.lrs(self.optimizer_steps)
        momenta = self.momenta(self.optimizer_steps)
        for group, lr, momentum in zip(self.optimizer.param_groups, lrs, momenta, strict=True):
            _write(group, "lr", lr)
            _write(group, "momentum", momentum)
