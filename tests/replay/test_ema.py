"""CPU tests of the EMA: the decay ramp, native vs replayed updates, argument checks."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from lucid_yolo.replay import ModelEMA, ReplayConfigError, first_difference, state_digest


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))


def test_model_ema_decay_ramps_up() -> None:
    ema = ModelEMA(_net(), decay=0.9, tau=2.0)
    assert ema.current_decay() == pytest.approx(0.9 * (1 - math.exp(-0.5)))
    ema.update()
    assert ema.current_decay() == pytest.approx(0.9 * (1 - math.exp(-1.0)))


def test_model_ema_blends_weights() -> None:
    net = _net()
    ema = ModelEMA(net, decay=0.5, tau=0.0, graphed=False)
    with torch.no_grad():
        net[0].weight.add_(2.0)
    before = ema.module[0].weight.clone()
    ema.update()
    assert torch.allclose(ema.module[0].weight, 0.5 * before + 0.5 * net[0].weight)


def test_model_ema_copies_integer_buffers() -> None:
    net = _net()
    ema = ModelEMA(net)
    net(torch.randn(4, 3))
    ema.update()
    assert int(ema.module[1].num_batches_tracked) == 1


def test_model_ema_replay_matches_native() -> None:
    net_a, net_b = _net(), _net()
    native, replayed = ModelEMA(net_a, tau=3.0, graphed=False), ModelEMA(net_b, tau=3.0)
    for _ in range(4):
        for net in (net_a, net_b):
            with torch.no_grad():
                net[0].weight.mul_(1.1)
        native.update()
        replayed.update()
    assert first_difference(state_digest(native), state_digest(replayed)) is None
    assert replayed.telemetry.replays == 3


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"decay": 1.0}, "decay=1.0"), ({"tau": -1.0}, "tau=-1.0")]
)
def test_model_ema_rejects_bad_arguments(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ReplayConfigError, match=message):
        ModelEMA(_net(), **kwargs)  # type: ignore[arg-type]
