"""The runtime verifier in the trainer: every N-th optimizer step also runs as a native shadow.

With ``verify_every=N`` the module snapshots the training state at the start of every N-th step
(network weights, buffers and gradients, MuSGD state, EMA, GradScaler, RNG) and keeps that step's
micro-batches. After the step has run replayed, it digests the result, restores the snapshot and
runs the same micro-batches natively through the same Lightning machinery (the precision
plugin's autocast, loss normalisation, backward, clipping, GradScaler and optimizer step). Equal
digests prove the replay bitwise on that step; on the first difference every recorder retires with
``parity-mismatch`` and the digest key and step go into the telemetry. Training always continues
from the native result, so a difference never reaches the weights (DESIGN.md §4 "Verifier").

A shadowed step costs a snapshot, two digests and a second native step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, cast

import torch
from torch import Tensor, nn

from lucid_yolo.replay import (
    RegionRecorder,
    RetireReason,
    Telemetry,
    TrainingSnapshot,
    UpdateRecorder,
    Verifier,
    first_difference,
    grads_of,
    state_digest,
)
from lucid_yolo.replay.verifier import scaler_tensors, state_tensors
from lucid_yolo.train.data.batch import Batch

Recorder = RegionRecorder | UpdateRecorder


class _Ema(Protocol):
    module: nn.Module

    def state_tensors(self) -> list[Tensor]: ...

    def state_dict(self) -> dict[str, Any]: ...


class StepVerifier:
    """Shadows every ``every``-th optimizer step with a native run and compares digests.

    Args:
        every: verify every ``every``-th optimizer step; ``0`` turns the verifier off.

    Raises:
        lucid_yolo.replay.ReplayConfigError: for a negative ``every``.
    """

    def __init__(self, every: int) -> None:
        self.schedule = Verifier(every)
        self._telemetry = Telemetry()
        self._snapshot: TrainingSnapshot | None = None
        self._batches: list[Batch] = []

    @property
    def telemetry(self) -> Telemetry:
        """Steps verified and the first mismatch (the regions' counters live with them)."""
        return self._telemetry

    @property
    def armed(self) -> bool:
        """Whether the step under way is being kept for a shadow run."""
        return self._snapshot is not None

    def start_micro_batch(
        self,
        batch: Batch,
        *,
        first_of_step: bool,
        steps_done: int,
        net: nn.Module,
        state: Callable[[], Sequence[Tensor]],
    ) -> None:
        """Before a micro-batch: arm on the first one of a due step, keep the batch if armed.

        Args:
            batch: the micro-batch, kept as a clone (the step may scale its images in place).
            first_of_step: whether it opens an accumulation window.
            steps_done: optimizer steps completed so far.
            net: the trained network.
            state: every other tensor the step writes (optimizer, EMA, GradScaler).
        """
        if first_of_step and self.schedule.due(steps_done):
            self._snapshot = TrainingSnapshot(net, state())
            self._batches = []
        if self._snapshot is not None:
            kept = {k: v.clone() for k, v in cast(dict[str, Tensor], batch).items()}
            self._batches.append(cast(Batch, kept))

    def finish_step(
        self,
        *,
        step: int,
        digest: Callable[[], dict[str, str]],
        native_step: Callable[[Sequence[Batch]], None],
        recorders: Sequence[Recorder],
        device: torch.device,
    ) -> None:
        """After the replayed optimizer step: rerun it natively from the snapshot and compare.

        Args:
            step: the number of the optimizer step just taken (1 for the first).
            digest: digests of the whole training state.
            native_step: runs the kept micro-batches and the optimizer step natively.
            recorders: every recorder of the step; disabled for the shadow run, retired on a
                difference.
            device: the training device (its RNG is kept as the replayed step left it).
        """
        snapshot, batches = self._snapshot, self._batches
        self._snapshot, self._batches = None, []
        if snapshot is None:
            return
        replayed = digest()
        after_step_rng = _RngState(device)
        snapshot.restore()
        with native(recorders):
            native_step(batches)
        # The shadow run drew what the replayed run drew; the data pipeline's draws made
        # between micro-batches must not be rewound.
        after_step_rng.restore()
        self._telemetry.verified += 1
        differing = first_difference(digest(), replayed)
        if differing is None:
            return
        self._telemetry.record_mismatch(differing, step)
        detail = f"{differing!r} differs after step {step}; continuing natively"
        for recorder in recorders:
            recorder.retire(RetireReason.PARITY_MISMATCH, detail)


class _RngState:
    """The CPU generator's state and, on a CUDA device, that device's generator state."""

    def __init__(self, device: torch.device) -> None:
        self._cpu = torch.get_rng_state()
        self._device = device if device.type == "cuda" else None
        self._cuda = None if self._device is None else torch.cuda.get_rng_state(self._device)

    def restore(self) -> None:
        torch.set_rng_state(self._cpu)
        if self._device is not None and self._cuda is not None:
            torch.cuda.set_rng_state(self._cuda, self._device)


def training_state(optimizer: torch.optim.Optimizer, ema: _Ema, scaler: Any) -> list[Tensor]:
    """Every tensor an optimizer step writes besides the network's own."""
    return [*state_tensors(optimizer.state), *ema.state_tensors(), *scaler_tensors(scaler)]


def training_digest(
    net: nn.Module, optimizer: torch.optim.Optimizer, ema: _Ema, scaler: Any
) -> dict[str, str]:
    """Digests of weights, buffers, gradients, optimizer, EMA and GradScaler state."""
    return state_digest(
        {
            "model": net,
            "grads": grads_of(net),
            "optimizer": optimizer,
            "ema": ema.state_dict(),
            "scaler": scaler,
        }
    )


@contextlib.contextmanager
def native(recorders: Sequence[Recorder]) -> Iterator[None]:
    """Run every recorder natively for the duration; restore their switches after."""
    saved = [r.enabled for r in recorders]
    for recorder in recorders:
        recorder.enabled = False
    try:
        yield
    finally:
        for recorder, enabled in zip(recorders, saved, strict=True):
            recorder.enabled = enabled


__all__ = ["StepVerifier", "native", "training_digest", "training_state"]
