"""Per-phase step timing: data wait, network, loss, backward, optimizer update.

The split tells where a training step spends its time, which is what replay changes. On CUDA each
boundary records an event and a step's durations are read only once its last event has completed
(``Event.query()``), so timing adds no host synchronisation to the step. Without the callback
nothing is recorded at all: the module's phase marks are a no-op.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lucid_yolo.train.callbacks.device_clock import DeviceClock
from lucid_yolo.train.exceptions import TrainConfigError
from lucid_yolo.train.log_cadence import reaches_loggers

PHASES = ("data", "network", "loss", "backward", "update")
"""Phase names in step order; logged as ``time/<phase>_ms``."""

BETWEEN_STEPS = "between_steps"
"""Logged as ``time/between_steps_ms``: the span on the step's timeline from one step's update
mark to the next step's start mark, within an epoch. Not a phase: it overlaps ``data``."""

_BOUNDARIES = ("start", "network", "loss", "backward", "update")


@dataclass
class _Step:
    data_ms: float
    images: int
    previous_end: DeviceClock | None
    marks: dict[str, DeviceClock] = field(default_factory=dict)


class PhaseTimer(Callback):
    """Log the mean time per phase of the training step, images per second and GPU memory.

    Phases: ``data`` (waiting for the next batch, host time), ``network`` (forward of the network
    or its replay), ``loss`` (loss and assignment), ``backward``, ``update`` (optimizer step, EMA;
    zero on accumulation micro-batches). With the network and its loss replayed as one region
    (``replay.loss_with_network``, the default where both replay without segment heads) the
    network phase holds the loss, and ``loss`` reads about 0.
    A step whose boundaries are not all reached (for instance a skipped backward) is dropped
    from the means.

    Beside the phases, ``between_steps`` is the span between two steps of an epoch on the
    step's own timeline (on CUDA the device's: the batch's copy, the device's pixel work, and
    any time the device waits for the host to queue the next step). ``data`` is the host's
    wait for the batch, which overlaps the device's work of the step before and so need not
    stall it; ``between_steps`` is what the device spends outside the steps' phases, so what a
    starved device shows (issue 11's data-wait goal reads both).

    The means run over the epoch so far. ``img_s`` (images per second of step time, data wait
    included) and, on CUDA, ``mem_gib`` (reserved memory) are shown in the progress bar every
    ``log_every_n_steps`` batches; the phase means, which no bar shows, only when they reach the
    loggers or the epoch's summary (:func:`~lucid_yolo.train.log_cadence.reaches_loggers`).

    Args:
        log_every_n_steps: how often, in batches, the progress bar's rate and memory are logged.

    Example:
        ``Trainer(callbacks=[PhaseTimer()])``, or ``--trainer.callbacks+=PhaseTimer`` on the CLI.
    """

    def __init__(self, log_every_n_steps: int = 10) -> None:
        if log_every_n_steps < 1:
            raise TrainConfigError(f"log_every_n_steps must be >= 1, got {log_every_n_steps!r}")
        self.log_every_n_steps = log_every_n_steps
        self._cuda = False
        self._last_end: float | None = None
        self._step_of_batch = 0
        self._current: _Step | None = None
        self._previous_end: DeviceClock | None = None
        self._pending: deque[_Step] = deque()
        self._sums = dict.fromkeys(PHASES, 0.0)
        self._count = 0
        self._images = 0
        self._between_sum = 0.0
        self._between_count = 0

    def mark(self, boundary: str) -> None:
        """Record that the step reached ``boundary`` (one of ``network``, ``loss``, ...)."""
        if self._current is not None:
            self._current.marks[boundary] = DeviceClock(self._cuda)

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._cuda = pl_module.device.type == "cuda" or trainer.strategy.root_device.type == "cuda"
        if hasattr(pl_module, "phase_marker"):
            setattr(pl_module, "phase_marker", self.mark)  # noqa: B010

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if hasattr(pl_module, "phase_marker"):
            setattr(pl_module, "phase_marker", None)  # noqa: B010

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_end = None
        self._previous_end = None
        self._pending.clear()
        self._sums = dict.fromkeys(PHASES, 0.0)
        self._count = 0
        self._images = 0
        self._between_sum = 0.0
        self._between_count = 0

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        # the optimizer step this batch belongs to: at its end the trainer has counted it only
        # if the batch stepped (under accumulation most batches do not)
        self._step_of_batch = trainer.global_step + 1
        data_ms = 0.0 if self._last_end is None else (now - self._last_end) * 1000.0
        images = batch["images"] if isinstance(batch, dict) and "images" in batch else None
        self._current = _Step(
            data_ms=data_ms,
            images=0 if images is None else len(images),
            previous_end=self._previous_end,
        )
        self.mark("start")

    @override
    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor
    ) -> None:
        self.mark("loss")

    @override
    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.mark("backward")

    @override
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self.mark("update")
        if self._current is not None:
            self._previous_end = self._current.marks["update"]
            self._pending.append(self._current)
            self._current = None
        self._collect()
        # Host tensors: Lightning would copy a Python float to the module's device (a host
        # sync), and the progress bar reads its values back at every batch (another).
        if self._count and reaches_loggers(trainer, self._step_of_batch, batch_idx):
            means = {f"time/{p}_ms": torch.tensor(self._sums[p] / self._count) for p in PHASES}
            between = self.between_steps_ms()
            if between is not None:
                means[f"time/{BETWEEN_STEPS}_ms"] = torch.tensor(between)
            pl_module.log_dict(means, on_step=True, on_epoch=False, prog_bar=False)
        if self._count and (batch_idx + 1) % self.log_every_n_steps == 0:
            total_ms = sum(self._sums.values())
            if total_ms > 0.0:
                rate = torch.tensor(self._images * 1000.0 / total_ms)
                pl_module.log("img_s", rate, on_step=True, on_epoch=False, prog_bar=True)
            if self._cuda:
                reserved = torch.tensor(torch.cuda.memory_reserved() / 2**30)
                pl_module.log("mem_gib", reserved, on_step=True, on_epoch=False, prog_bar=True)
        self._last_end = time.perf_counter()

    def summary(self) -> dict[str, float]:
        """Mean milliseconds per phase over the steps of this epoch resolved so far."""
        self._collect()
        if not self._count:
            return {}
        return {p: self._sums[p] / self._count for p in PHASES}

    def between_steps_ms(self) -> float | None:
        """Mean milliseconds between two steps of this epoch (:data:`BETWEEN_STEPS`), over the
        steps resolved so far; ``None`` before the epoch's second."""
        self._collect()
        return self._between_sum / self._between_count if self._between_count else None

    def _collect(self) -> None:
        while self._pending and self._pending[0].marks["update"].done():
            step = self._pending.popleft()
            durations = _durations(step)
            if durations is None:
                continue
            if step.previous_end is not None:
                self._between_sum += step.marks["start"].ms_since(step.previous_end)
                self._between_count += 1
            for phase, ms in durations.items():
                self._sums[phase] += ms
            self._count += 1
            self._images += step.images


def _durations(step: _Step) -> dict[str, float] | None:
    if any(b not in step.marks for b in _BOUNDARIES):
        return None
    times = {"data": step.data_ms}
    for phase, (start, end) in zip(PHASES[1:], itertools.pairwise(_BOUNDARIES), strict=True):
        times[phase] = step.marks[end].ms_since(step.marks[start])
    return times


__all__ = ["BETWEEN_STEPS", "PHASES", "PhaseTimer"]
