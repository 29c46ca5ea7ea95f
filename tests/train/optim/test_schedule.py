"""Warm-up then linear-decay schedule: values at key steps, in-place writes, state round-trip."""

from typing import Any

import pytest
import torch
from torch import nn

from lucid_yolo.train.optim import (
    BIAS,
    MuSGD,
    OptimizerConfigError,
    OptimizerStateError,
    WarmupLinearSchedule,
    param_groups,
)


def _musgd() -> MuSGD:
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
    return MuSGD(param_groups(net, weight_decay=5e-4), lr=0.01, momentum=0.937)


def _schedule(optimizer: torch.optim.Optimizer, **overrides: Any) -> WarmupLinearSchedule:
    """10 epochs × 20 steps = 200 steps; 3 warm-up epochs = 60 steps, raised to the 100 minimum."""
    return WarmupLinearSchedule(optimizer, **{"epochs": 10, "steps_per_epoch": 20, **overrides})


def _advance(schedule: WarmupLinearSchedule, steps: int) -> None:
    for _ in range(steps):
        schedule.step()


def _values(optimizer: torch.optim.Optimizer, key: str) -> list[float]:
    return [float(group[key]) for group in optimizer.param_groups]


def test_schedule_first_step_uses_warmup_start_values() -> None:
    opt = _musgd()
    _schedule(opt)
    assert opt.param_groups[0]["kind"] == BIAS
    assert _values(opt, "lr") == pytest.approx([0.1, 0.0, 0.0])
    assert _values(opt, "momentum") == pytest.approx([0.8, 0.8, 0.8])


def test_schedule_halfway_through_warmup_interpolates() -> None:
    opt = _musgd()
    _advance(_schedule(opt), 50)
    target = 0.01 * (1 - 0.99 * 50 / 200)
    assert _values(opt, "lr") == pytest.approx(
        [0.1 + (target - 0.1) / 2, target / 2, target / 2], rel=1e-6
    )
    assert _values(opt, "momentum") == pytest.approx([0.8685] * 3, rel=1e-6)


def test_schedule_after_warmup_decays_linearly() -> None:
    opt = _musgd()
    _advance(_schedule(opt), 100)
    assert _values(opt, "lr") == pytest.approx([0.01 * (1 - 0.99 / 2)] * 3, rel=1e-6)
    assert _values(opt, "momentum") == pytest.approx([0.937] * 3, rel=1e-6)


def test_schedule_ends_at_lrf_and_stays_there() -> None:
    opt = _musgd()
    schedule = _schedule(opt)
    _advance(schedule, 200)
    assert _values(opt, "lr") == pytest.approx([1e-4] * 3, rel=1e-5)
    _advance(schedule, 5)
    assert _values(opt, "lr") == pytest.approx([1e-4] * 3, rel=1e-5)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, 100),
        ({"steps_per_epoch": 50}, 150),
        ({"warmup_steps": 7}, 7),
        ({"min_warmup_steps": 0, "warmup_epochs": 0.5}, 10),
        ({"warmup_epochs": 20.0}, 200),
    ],
)
def test_schedule_warmup_length(overrides: dict[str, float], expected: int) -> None:
    assert _schedule(_musgd(), **overrides).warmup_steps == expected


def test_schedule_writes_into_musgd_tensors_in_place() -> None:
    opt = _musgd()
    tensors = [(g["lr"], g["momentum"]) for g in opt.param_groups]
    _advance(_schedule(opt), 120)
    assert [(g["lr"], g["momentum"]) for g in opt.param_groups] == tensors
    assert float(tensors[2][0]) == pytest.approx(0.01 * (1 - 0.99 * 120 / 200), rel=1e-6)


def test_schedule_drives_float_groups_of_torch_sgd() -> None:
    net = nn.Linear(4, 2)
    opt = torch.optim.SGD(param_groups(net, weight_decay=0.0), lr=0.02, momentum=0.9)
    _advance(_schedule(opt, warmup_steps=0), 100)
    assert _values(opt, "lr") == pytest.approx([0.02 * (1 - 0.99 / 2)] * 2)
    assert _values(opt, "momentum") == pytest.approx([0.9, 0.9])


def test_schedule_state_dict_round_trip() -> None:
    opt = _musgd()
    schedule = _schedule(opt)
    _advance(schedule, 42)
    resumed_opt = _musgd()
    resumed = _schedule(resumed_opt)
    resumed.load_state_dict(schedule.state_dict())
    assert resumed.optimizer_steps == 42
    assert _values(resumed_opt, "lr") == _values(opt, "lr")
    assert _values(resumed_opt, "momentum") == _values(opt, "momentum")


def test_schedule_load_state_dict_rejects_other_grouping() -> None:
    schedule = _schedule(_musgd())
    state = schedule.state_dict()
    state["base_lrs"] = state["base_lrs"][:2]
    with pytest.raises(OptimizerStateError, match="schedule state has 2 groups"):
        schedule.load_state_dict(state)


def test_schedule_rejects_lrf_above_one() -> None:
    with pytest.raises(OptimizerConfigError, match=r"lrf must be in \[0, 1\], got 2.0"):
        _schedule(_musgd(), lrf=2.0)


def test_schedule_rejects_optimizer_without_momentum() -> None:
    adam = torch.optim.Adam(nn.Linear(2, 2).parameters())
    with pytest.raises(OptimizerConfigError, match=r"param group 0 has no \['momentum'\]"):
        _schedule(adam)
