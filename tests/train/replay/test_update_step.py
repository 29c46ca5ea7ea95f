"""Update step: MuSGD's update and the EMA blend, native or replayed (CPU stand-in here).

On the CPU the replay library's stand-in runs the recorded update natively but through the same
bookkeeping as a CUDA replay (static gradient buffers refreshed before each launch, state
snapshotted around the capture), so a fit with ``replay.update`` must equal a native fit
bitwise here too; the CUDA graphs themselves are compared in ``test_replay_parity.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from lucid_yolo.replay import first_difference, state_digest
from lucid_yolo.train import ReplayConfig
from lucid_yolo.train.exceptions import TrainError
from lucid_yolo.train.optim import MuSGD, param_groups, trainer_ema
from lucid_yolo.train.replay.update_step import UpdateStep

pytestmark = pytest.mark.filterwarnings(
    "ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"
)

CPU_FIT = {"accelerator": "cpu", "imgsz": 64, "max_steps": 4}
UPDATE = ReplayConfig(update=True)


def test_update_step_cpu_replay_equals_native_fit(
    tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    yaml = tiny_dataset("detect")
    native = fit_digests(yaml, "detect", "32-true", 1, **CPU_FIT)
    replayed = fit_digests(yaml, "detect", "32-true", 1, replay=UPDATE, **CPU_FIT)
    assert native.telemetry["replays"] == native.telemetry["recordings"] == 0
    assert replayed.telemetry["recordings"] == 1
    assert replayed.telemetry["replays"] == 3
    assert replayed.telemetry["retirements"] == 0
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses
    assert native.ema_updates == replayed.ema_updates == 4


def test_update_step_blends_ema_once_per_update_under_accumulation(
    tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    yaml = tiny_dataset("detect")
    replayed = fit_digests(
        yaml, "detect", "32-true", 2, replay=UPDATE, **{**CPU_FIT, "max_steps": 3}
    )
    assert len(replayed.losses) == 6
    assert replayed.ema_updates == 3
    assert replayed.telemetry["replays"] == 2


def test_update_step_joins_the_network_replay_pool(
    tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    yaml = tiny_dataset("detect")
    fit = fit_digests(
        yaml, "detect", "32-true", 1, replay=ReplayConfig(network=True, update=True), **CPU_FIT
    )
    module = fit.module
    assert module.update_step is not None
    assert module.replay.network is not None
    assert module.update_step.graphed.recorder.pool is module.replay.network.pool
    assert fit.telemetry["retirements"] == 0


def _linear_step(allows: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """State digests of a linear net's training state before and after one ``optimizer.step``."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3))
    optimizer = MuSGD(param_groups(net, weight_decay=5e-4), lr=0.1, momentum=0.9)
    ema = trainer_ema(net, decay=0.9, tau=1.0)
    UpdateStep(optimizer, ema, replay=False, allows_update=lambda: allows)

    def state() -> dict[str, Any]:
        return state_digest(
            {"net": net.state_dict(), "opt": optimizer.state_dict(), "ema": ema.state_tensors()}
        )

    net(torch.randn(2, 4)).sum().backward()
    before = state()
    optimizer.step()
    return before, state()


def test_update_step_left_out_when_not_allowed() -> None:
    before, after = _linear_step(allows=False)
    assert first_difference(before, after) is None


def test_update_step_runs_when_allowed() -> None:
    before, after = _linear_step(allows=True)
    assert first_difference(before, after) is not None


def _backed_up_linear(replay: bool) -> tuple[UpdateStep, nn.Module, MuSGD, Callable[[], Any]]:
    """A linear net's update step with a backup; ``state()`` digests net, optimizer and EMA."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3))
    optimizer = MuSGD(param_groups(net, weight_decay=5e-4), lr=0.1, momentum=0.9)
    ema = trainer_ema(net, decay=0.9, tau=1.0)
    step = UpdateStep(optimizer, ema, replay=replay, backup=True)

    def state() -> Any:
        return state_digest(
            {"net": net.state_dict(), "opt": optimizer.state_dict(), "ema": ema.state_tensors()}
        )

    return step, net, optimizer, state


def _train_step(net: nn.Module, optimizer: MuSGD) -> None:
    optimizer.zero_grad()
    net(torch.randn(2, 4)).sum().backward()
    optimizer.step()


def test_update_step_backup_is_part_of_the_replayed_update() -> None:
    step, net, optimizer, state = _backed_up_linear(replay=True)
    for _ in range(2):  # warm-up, then recorded (the CPU stand-in)
        _train_step(net, optimizer)
    net(torch.randn(2, 4)).sum().backward()
    before = state()
    optimizer.step()
    assert step.telemetry.replays == 2
    step.undo(schedule=False)
    assert first_difference(before, state()) is None


def test_update_step_undo_with_schedule_puts_the_learning_rate_back() -> None:
    step, net, optimizer, state = _backed_up_linear(replay=False)
    net(torch.randn(2, 4)).sum().backward()
    before = state()
    optimizer.step()
    optimizer.param_groups[0]["lr"].fill_(0.5)  # what a schedule does after the update
    step.undo(schedule=True)
    assert first_difference(before, state()) is None


def test_update_step_undo_without_schedule_keeps_the_learning_rate() -> None:
    step, net, optimizer, _ = _backed_up_linear(replay=False)
    net(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    optimizer.param_groups[0]["lr"].fill_(0.5)
    step.undo(schedule=False)
    assert float(optimizer.param_groups[0]["lr"]) == 0.5


def test_update_step_undo_without_backup_is_an_error() -> None:
    net = nn.Sequential(nn.Linear(4, 3))
    optimizer = MuSGD(param_groups(net, weight_decay=5e-4), lr=0.1)
    step = UpdateStep(optimizer, trainer_ema(net), replay=False)
    with pytest.raises(TrainError, match=r"keeps no backup: build it with backup=True"):
        step.undo(schedule=False)


def _clipped_linear(replay: bool, allows: bool) -> tuple[UpdateStep, nn.Module, MuSGD]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3))
    optimizer = MuSGD(param_groups(net, weight_decay=5e-4), lr=0.1, momentum=0.9)
    step = UpdateStep(
        optimizer, trainer_ema(net), replay=replay, clip_norm=0.5, allows_update=lambda: allows
    )
    return step, net, optimizer


def _grads_after_steps(net: nn.Module, optimizer: MuSGD, steps: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        optimizer.zero_grad()
        (100 * net(torch.randn(2, 4, generator=gen))).sum().backward()
        optimizer.step()
    return [p.grad.clone() for p in net.parameters() if p.grad is not None]


@pytest.mark.parametrize("allows", [True, False], ids=["applied", "left-out"])
def test_update_step_clips_the_gradients_before_the_update(allows: bool) -> None:
    _, net, optimizer = _clipped_linear(replay=False, allows=allows)
    grads = _grads_after_steps(net, optimizer, 1)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    assert float(total) == pytest.approx(0.5, rel=1e-5)


def test_update_step_replayed_clip_leaves_the_gradients_of_a_native_step() -> None:
    native_step, native_net, native_opt = _clipped_linear(replay=False, allows=True)
    replayed_step, replayed_net, replayed_opt = _clipped_linear(replay=True, allows=True)
    native = _grads_after_steps(native_net, native_opt, 3)
    replayed = _grads_after_steps(replayed_net, replayed_opt, 3)
    assert replayed_step.telemetry.replays == 2
    assert all(torch.equal(n, r) for n, r in zip(native, replayed, strict=True))
    assert first_difference(state_digest(native_net), state_digest(replayed_net)) is None
    assert native_step.clip_norm == replayed_step.clip_norm == 0.5
