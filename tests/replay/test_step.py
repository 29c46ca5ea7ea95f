"""CPU tests of the whole-step helper: parity with a hand-written loop and the verifier.

The comparisons with native run on the CPU stand-in, which re-runs each recorded body eagerly: both
sides execute the same kernels, so they pin the bookkeeping (micro-batch accounting, the update and
EMA order, GradScaler handling, the verifier) and nothing about CUDA graph kernels;
``tests/replay/test_gpu_parity.py`` compares real graphs.
"""

from __future__ import annotations

import copy

import pytest
import torch
from replay_nets import loss_of, make_net
from torch import Tensor, nn

from lucid_yolo.replay import (
    ModelEMA,
    ReplayConfigError,
    ReplayRetiredWarning,
    ReplayStep,
    RetireReason,
    first_difference,
    grads_of,
    state_digest,
)
from lucid_yolo.replay._graphs import RegionGraphs


def _data(steps: int) -> list[tuple[Tensor, Tensor]]:
    gen = torch.Generator().manual_seed(7)
    return [
        (torch.randn(2, 3, 8, 8, generator=gen), torch.randn(2, 4, 8, 8, generator=gen))
        for _ in range(steps)
    ]


def _sgd(net: nn.Module) -> torch.optim.SGD:
    return torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)


def _native_loop(net: nn.Module, batches: list[tuple[Tensor, Tensor]], accumulation: int) -> dict:
    optimizer, ema = _sgd(net), ModelEMA(net, tau=3.0, graphed=False)
    torch.manual_seed(0)
    for i, (x, target) in enumerate(batches):
        (loss_of(net(x), target) / accumulation).backward()
        if (i + 1) % accumulation == 0:
            optimizer.step()
            optimizer.zero_grad()
            ema.update()
    return state_digest({"net": net, "grads": grads_of(net), "opt": optimizer, "ema": ema})


def _replay_loop(
    net: nn.Module, batches: list[tuple[Tensor, Tensor]], accumulation: int, **kwargs: int
) -> tuple[dict, ReplayStep]:
    optimizer, ema = _sgd(net), ModelEMA(net, tau=3.0)
    step = ReplayStep(net, loss_of, optimizer, accumulation=accumulation, ema=ema, **kwargs)
    torch.manual_seed(0)
    for x, target in batches:
        step(x, target)
    digest = state_digest({"net": net, "grads": grads_of(net), "opt": optimizer, "ema": ema})
    return digest, step


@pytest.mark.parametrize("accumulation", [1, 2])
def test_replay_step_matches_hand_written_loop(accumulation: int) -> None:
    batches = _data(6)
    expected = _native_loop(make_net(), batches, accumulation)
    got, step = _replay_loop(make_net(), batches, accumulation)
    assert first_difference(expected, got) is None
    steps = len(batches) // accumulation
    # one native warm-up call each, then every call replays
    assert step.region.telemetry.replays == len(batches) - 1
    assert step.updater.telemetry.replays == steps - 1
    assert step.ema is not None
    assert step.ema.telemetry.replays == steps - 1


def test_replay_step_verifier_passes_when_replay_is_exact() -> None:
    batches = _data(8)
    expected = _native_loop(make_net(), batches, 2)
    got, step = _replay_loop(make_net(), batches, 2, verify_every=1)
    assert first_difference(expected, got) is None
    assert step.telemetry.as_dict()["verified"] == 3
    assert step.telemetry.as_dict()["parity_mismatches"] == 0


def test_replay_step_verifier_retires_on_mismatch_and_keeps_native_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = RegionGraphs.launch_backward

    def corrupted(self: RegionGraphs, pattern: frozenset[str]) -> None:
        original(self, pattern)
        grads = [g for g in self.static_grads[pattern] if g is not None]
        grads[-1].add_(1.0)

    monkeypatch.setattr(RegionGraphs, "launch_backward", corrupted)
    batches = _data(6)
    expected = _native_loop(make_net(), batches, 1)
    with pytest.warns(ReplayRetiredWarning, match=r"parity-mismatch.*'model\.head_b\.bias'"):
        got, step = _replay_loop(make_net(), batches, 1, verify_every=1)
    assert first_difference(expected, got) is None
    assert step.telemetry.as_dict()["parity_mismatches"] == 1
    recorder = step.region.recorder
    assert recorder.retired is not None
    assert recorder.retired.reason is RetireReason.PARITY_MISMATCH


def test_replay_step_fp16_creates_a_gradscaler() -> None:
    step = ReplayStep(make_net(), loss_of, _sgd(make_net()), precision="fp16")
    assert isinstance(step.scaler, torch.amp.GradScaler)


def test_replay_step_accepts_a_sequence_of_inputs() -> None:
    net = make_net()
    step = ReplayStep(net, loss_of, _sgd(net))
    x, target = _data(1)[0]
    loss = step([x], target)
    assert loss.ndim == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"accumulation": 0}, "accumulation=0"), ({"precision": "fp8"}, "precision='fp8'")],
)
def test_replay_step_rejects_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    net = make_net()
    with pytest.raises(ReplayConfigError, match=message):
        ReplayStep(net, loss_of, _sgd(net), **kwargs)  # type: ignore[arg-type]


def test_replay_step_ema_shares_the_step_pool() -> None:
    net = make_net()
    ema = ModelEMA(copy.deepcopy(net))
    step = ReplayStep(net, loss_of, _sgd(net), ema=ema)
    assert ema.recorder.pool is step.pool


def _skipped_fp16_step(ema_on_skipped_steps: bool) -> ModelEMA:
    """One fp16 step whose loss is infinite, so GradScaler skips the update."""
    net = make_net()
    ema = ModelEMA(net, tau=3.0, graphed=False)

    def infinite_loss(outputs: dict[str, Tensor], target: Tensor) -> Tensor:
        return loss_of(outputs, target) * float("inf")

    step = ReplayStep(
        net,
        infinite_loss,
        _sgd(net),
        precision="fp16",
        ema=ema,
        ema_on_skipped_steps=ema_on_skipped_steps,
        enabled=False,
    )
    x, target = _data(1)[0]
    step(x, target)
    assert step.updater.applied == 0
    return ema


def test_replay_step_skipped_update_does_not_blend_the_ema() -> None:
    ema = _skipped_fp16_step(ema_on_skipped_steps=False)
    assert int(ema.updates) == 0


def test_replay_step_skipped_update_blends_the_ema_when_asked() -> None:
    ema = _skipped_fp16_step(ema_on_skipped_steps=True)
    assert int(ema.updates) == 1
