"""The optimizer update and the EMA blend as one step, run natively or replayed from a CUDA graph.

After the network, the rest of a YOLO26 training step is the gradient clip, the MuSGD update
(momentum, batched Newton–Schulz orthogonalisation per matrix shape, the blended step) and the EMA
blend: hundreds of small kernels whose launch cost dominates at small batch. All are graph-safe by
construction (hyperparameters and the EMA update count are device tensors, state is created up
front), so they are recorded together as one update graph
(:class:`lucid_yolo.replay.GraphedOptimizer` with a custom update), which reads gradients from
static buffers that each replay refreshes and, since the clip changes them, copies back.

The step is installed as :attr:`MuSGD.update_runner`, so it runs exactly where Lightning applies an
optimizer step: after the closure (forward, backward, and Lightning's own clip only when the
trainer was given one), only on accumulation
boundaries, and not at all on a step that fp16's GradScaler skips, or that the non-finite loss
guard leaves out in fp32/bf16 (:mod:`lucid_yolo.train.non_finite_loss`). The EMA therefore blends
once per applied update, natively and replayed alike.

With ``backup=True`` the step first copies everything it writes (:class:`UpdateBackup`), inside
the same graph when replayed, so that the guard can read a step's verdict after its update and
:meth:`UpdateStep.undo` a non-finite one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lucid_yolo.replay import GraphedOptimizer, ModelEMA, ReplayPool, Telemetry
from lucid_yolo.replay.verifier import state_tensors
from lucid_yolo.train.exceptions import TrainError
from lucid_yolo.train.optim import MuSGD
from lucid_yolo.train.replay.update_backup import UpdateBackup


class UpdateStep:
    """MuSGD's update followed by the EMA blend, bound into the optimizer.

    Args:
        optimizer: the run's MuSGD; its :attr:`~MuSGD.update_runner` is set to this step.
        ema: the weight average, blended from the network it was built from after each update.
        replay: record the step as a CUDA graph after one native warm-up step and replay it
            (on the CPU, the replay library's stand-in runs the same bookkeeping natively).
        max_signatures: update recordings kept (one per set of parameters with gradients).
        pool: the memory pool the step's other graphs use (graph memory is held for good, so
            every graph of a step shares one pool); ``None`` makes a private one.
        allows_update: asked before each update; ``False`` leaves the update and the EMA blend
            out of this step (``None``: always run).
        backup: copy the state the update writes before each update, so that :meth:`undo` can
            put it back (one more copy of the parameters, momentum buffers and EMA in memory).
        clip_norm: scale the gradients of all parameters to this total norm at most before the
            update, inside its graph (``clip_grad_norm_``, as Lightning's clip; 0 never clips).
            Run eagerly, the clip's host work (one norm tensor per parameter, gathered in a
            Python loop) was a large share of a replayed step's host time. A step whose update
            is left out is still clipped, so its gradients are what they were with Lightning's.
    """

    def __init__(
        self,
        optimizer: MuSGD,
        ema: ModelEMA,
        *,
        replay: bool,
        max_signatures: int = 2,
        pool: ReplayPool | None = None,
        allows_update: Callable[[], bool] | None = None,
        backup: bool = False,
        clip_norm: float = 0.0,
    ) -> None:
        self.optimizer = optimizer
        self.ema = ema
        self.replay = replay
        self.graphed = GraphedOptimizer(
            optimizer,
            update=self._native,
            extra_state=ema.state_tensors,
            writes_gradients=clip_norm > 0,
            max_signatures=max_signatures,
            pool=pool,
            enabled=replay,
        )
        self.allows_update = allows_update
        self.clip_norm = clip_norm
        self.backup = UpdateBackup(self._written, self._schedule) if backup else None
        optimizer.update_runner = self._run

    @property
    def telemetry(self) -> Telemetry:
        """The update recorder's counters (native calls only when the step is not replayed)."""
        return self.graphed.telemetry

    def undo(self, *, schedule: bool) -> None:
        """Put back the parameters, optimizer state and EMA from before the last update.

        Args:
            schedule: also put back the hyperparameters the schedule wrote after that update.

        Raises:
            TrainError: the step was built without ``backup``.
        """
        if self.backup is None:
            raise TrainError("this update step keeps no backup: build it with backup=True")
        self.backup.restore(schedule=schedule)

    def _run(self) -> None:
        if self.allows_update is None or self.allows_update():
            self.graphed.step()
        else:
            self._clip()

    def _native(self) -> None:
        # What a graph records: the clip, the backup, the update, the blend, in this order.
        self._clip()
        if self.backup is not None:
            self.backup.save()
        self.optimizer.apply_update()
        self.ema.update()

    def _clip(self) -> None:
        if self.clip_norm > 0:
            params = [p for group in self.optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(params, self.clip_norm)

    def _written(self) -> list[Tensor]:
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        return [*params, *state_tensors(self.optimizer.state), *self.ema.state_tensors()]

    def _schedule(self) -> list[Tensor]:
        groups = self.optimizer.param_groups
        return [v for g in groups for k, v in g.items() if k != "params" and isinstance(v, Tensor)]


__all__ = ["UpdateStep"]
