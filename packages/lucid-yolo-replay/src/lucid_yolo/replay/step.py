"""Level 3: a whole training step for a plain PyTorch loop, with every part that can be replayed.

:class:`ReplayStep` owns the order of one step — forward (replayed region), native loss, scaled
backward, and on the last micro-batch the update (unscale, inf check and scale update stay
native, the optimizer step replays), zeroing and the EMA update (replayed) — so users without
Lightning get the whole recipe and its parity guarantees from one object.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn

from lucid_yolo.replay.digest import first_difference, grads_of, state_digest
from lucid_yolo.replay.ema import ModelEMA
from lucid_yolo.replay.exceptions import ReplayConfigError
from lucid_yolo.replay.module import ReplayModule
from lucid_yolo.replay.pool import ReplayPool
from lucid_yolo.replay.protocols import RegionOutput, UpdateOptimizer
from lucid_yolo.replay.recorder import RegionRecorder
from lucid_yolo.replay.retire import RetireReason
from lucid_yolo.replay.telemetry import Telemetry, merge_telemetry
from lucid_yolo.replay.update import GraphedOptimizer, UpdateRecorder
from lucid_yolo.replay.verifier import (
    TrainingSnapshot,
    Verifier,
    scaler_tensors,
    state_tensors,
)

LossFn = Callable[[RegionOutput, Any], Tensor]
"""``loss_fn(outputs, target) -> scalar loss`` (native code after the replayed region)."""

_PRECISIONS = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


class ReplayStep:
    """Forward, loss, backward, optimizer update and EMA of one micro-batch per call.

    Args:
        model: the network; its forward is the replayed region.
        loss_fn: native loss on the model's outputs.
        optimizer: the optimizer; its ``step()`` replays when ``graph_update`` (then it must be
            capturable: tensor LR, ``capturable=True`` for Adam/AdamW, ``fused=True`` for SGD
            with a tensor LR).
        accumulation: micro-batches per optimizer step.
        precision: ``"fp32"``, ``"fp16"`` (autocast + GradScaler) or ``"bf16"`` (autocast).
        ema: an EMA to update after each applied optimizer step.
        ema_on_skipped_steps: also blend the EMA after a step that fp16's GradScaler skipped
            (an inf or NaN gradient: the weights did not change, but the average still moves
            towards them and its ramp advances). ``False``, the default, blends only after
            applied updates, as the trainer does.
        graph_update: replay the optimizer step too.
        verify_every: run every N-th optimizer step a second time natively and compare digests
            (``0``: never). Costs a snapshot and a native step each time.
        groups: prediction groups of the model's mapping output.
        pool: shared pool of the region, update and EMA graphs; ``None`` makes one.
        **recorder_options: passed to the region's
            :class:`~lucid_yolo.replay.recorder.RegionRecorder`.

    Raises:
        ReplayConfigError: for ``accumulation < 1`` or an unknown ``precision``.

    Example:
        >>> step = ReplayStep(net, criterion, optimizer, precision="bf16")  # doctest: +SKIP
        >>> for images, targets in loader:  # doctest: +SKIP
        ...     loss = step(images, targets)
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        optimizer: UpdateOptimizer,
        *,
        accumulation: int = 1,
        precision: str = "fp32",
        ema: ModelEMA | None = None,
        ema_on_skipped_steps: bool = False,
        graph_update: bool = True,
        verify_every: int = 0,
        groups: Mapping[str, Sequence[str]] | None = None,
        pool: ReplayPool | None = None,
        **recorder_options: Any,
    ) -> None:
        if accumulation < 1:
            raise ReplayConfigError(f"accumulation={accumulation!r}: expected 1 or more")
        if precision not in _PRECISIONS:
            raise ReplayConfigError(
                f"precision={precision!r}: expected one of {sorted(_PRECISIONS)!r}"
            )
        params = list(model.parameters())
        self.pool = pool if pool is not None else ReplayPool(params[0].device if params else None)
        self.model = model
        self.region = ReplayModule(model, groups, self.pool, **recorder_options)
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.updater = GraphedOptimizer(optimizer, pool=self.pool, enabled=graph_update)
        self.accumulation = accumulation
        self.precision = precision
        self.device_type = self.pool.device.type
        self.scaler = torch.amp.GradScaler(self.device_type) if precision == "fp16" else None
        self.ema = ema
        self.ema_on_skipped_steps = ema_on_skipped_steps
        if ema is not None and ema.recorder.pool is None:
            ema.recorder.pool = self.pool
        self.verifier = Verifier(verify_every)
        self.micro = 0
        self.steps_done = 0
        self._pending: list[tuple[tuple[Any, ...], Any]] = []
        self._snapshot: TrainingSnapshot | None = None

    def __call__(self, inputs: Tensor | Sequence[Tensor], target: Any) -> Tensor:
        """Train on one micro-batch; update after the ``accumulation``-th. Returns the loss."""
        args = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
        if self.micro == 0 and self.verifier.due(self.steps_done):
            self._snapshot = TrainingSnapshot(self.model, self._state_tensors())
        if self._snapshot is not None:
            self._pending.append((args, target))
        loss = self._micro_batch(args, target)
        if self.micro == 0 and self._snapshot is not None:
            self._verify()
        return loss

    @property
    def telemetry(self) -> Telemetry:
        """Region, update and EMA counters merged, with the verifier's counts."""
        parts = [self.region.telemetry, self.updater.telemetry]
        if self.ema is not None:
            parts.append(self.ema.telemetry)
        total = merge_telemetry(*parts)
        total.verified = self.verifier.verified
        total.parity_mismatches = self.verifier.mismatches
        return total

    def _micro_batch(self, args: tuple[Any, ...], target: Any) -> Tensor:
        with self._autocast():
            loss = self.loss_fn(self.region(*args), target) / self.accumulation
        torch.autograd.backward(self.scaler.scale(loss) if self.scaler is not None else loss)
        self.micro += 1
        if self.micro == self.accumulation:
            self._update()
        return loss.detach()

    def _update(self) -> None:
        applied = True
        if self.scaler is not None:
            # unscale, inf check (a host sync) and scale update stay native (invariant 23,
            # docs/replay-invariants.md).
            # GradScaler only reads param_groups and calls step(): the wrapper duck-types.
            replays = self.updater.applied
            self.scaler.step(cast(torch.optim.Optimizer, self.updater))
            self.scaler.update()
            applied = self.updater.applied > replays
        else:
            self.updater.step()
        self.updater.zero_grad()
        if self.ema is not None and (applied or self.ema_on_skipped_steps):
            self.ema.update()
        self.micro = 0
        self.steps_done += 1

    @contextlib.contextmanager
    def _autocast(self) -> Iterator[None]:
        dtype = _PRECISIONS[self.precision]
        if dtype is None:
            yield
            return
        with torch.autocast(self.device_type, dtype=dtype):
            yield

    def _state_tensors(self) -> list[Tensor]:
        tensors = state_tensors(getattr(self.optimizer, "state", {}))
        tensors += scaler_tensors(self.scaler)
        if self.ema is not None:
            tensors += [*self.ema.module.parameters(), *self.ema.module.buffers(), self.ema.updates]
        return tensors

    def _digest(self) -> dict[str, str]:
        return state_digest(
            {
                "model": self.model,
                "grads": grads_of(self.model),
                "optimizer": self.optimizer,
                "scaler": self.scaler,
                "ema": self.ema,
            }
        )

    def _verify(self) -> None:
        """Re-run the step just replayed natively from the snapshot; compare digests."""
        assert self._snapshot is not None
        replayed = self._digest()
        self._snapshot.restore()
        batches, self._pending, self._snapshot = self._pending, [], None
        self.steps_done -= 1
        with self._native():
            for args, target in batches:
                self._micro_batch(args, target)
        native = self._digest()
        self.verifier.verified += 1
        differing = first_difference(native, replayed)
        if differing is not None:
            self.verifier.mismatches += 1
            detail = f"{differing!r} differs after step {self.steps_done}; continuing natively"
            self.region.recorder.retire(RetireReason.PARITY_MISMATCH, detail)
            self.updater.recorder.retire(RetireReason.PARITY_MISMATCH, detail)
            if self.ema is not None:
                self.ema.recorder.retire(RetireReason.PARITY_MISMATCH, detail)

    @contextlib.contextmanager
    def _native(self) -> Iterator[None]:
        recorders: list[RegionRecorder | UpdateRecorder] = [
            self.region.recorder,
            self.updater.recorder,
        ]
        if self.ema is not None:
            recorders.append(self.ema.recorder)
        saved = [r.enabled for r in recorders]
        for r in recorders:
            r.enabled = False
        try:
            yield
        finally:
            for r, enabled in zip(recorders, saved, strict=True):
                r.enabled = enabled


__all__ = ["LossFn", "ReplayStep"]
