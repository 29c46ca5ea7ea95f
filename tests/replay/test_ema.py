"""CPU tests of the EMA: the decay ramp, the two options that change its bits, replay, checks.

The comparisons with native run on the CPU stand-in, which re-runs each recorded body eagerly: both
sides execute the same kernels, so they pin the bookkeeping (the decay schedule, the update counter,
the recorded blend's inputs) and nothing about CUDA graph kernels;
``tests/replay/test_gpu_parity.py`` compares real graphs.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from lucid_yolo.replay import ModelEMA, ReplayConfigError, first_difference, state_digest


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))


def _moved(net: nn.Module) -> None:
    """Change the live weights and BatchNorm statistics, as a training step would."""
    with torch.no_grad():
        net[0].weight.mul_(1.1)
    net(torch.randn(4, 3))


def test_model_ema_host_decay_ramps_up_in_float64() -> None:
    net = _net()
    ema = ModelEMA(net, decay=0.9, tau=2.0, graphed=False)
    before = ema.module[0].weight.clone()
    _moved(net)
    ema.update()
    d = 0.9 * (1 - math.exp(-1 / 2.0))  # float64 on the host, then rounded to float32
    keep, take = torch.tensor(d), torch.tensor(1.0 - d)
    assert torch.equal(ema.module[0].weight, before * keep + net[0].weight * take)
    assert ema.updates.device.type == "cpu"
    assert int(ema.updates) == 1


def test_model_ema_device_decay_is_computed_in_float32() -> None:
    net = _net()
    ema = ModelEMA(net, decay=0.9, tau=2.0, decay_on="device", graphed=False)
    before = ema.module[0].weight.clone()
    _moved(net)
    ema.update()
    keep = 0.9 * (1.0 - torch.exp(torch.tensor(1.0) / -2.0))  # float32 throughout
    assert torch.equal(ema.module[0].weight, before * keep + net[0].weight * (1.0 - keep))
    assert int(ema.updates) == 1


@pytest.mark.parametrize("decay_on", ["host", "device"])
def test_model_ema_tau_zero_disables_the_ramp(decay_on: str) -> None:
    net = _net()
    ema = ModelEMA(net, decay=0.5, tau=0.0, decay_on=decay_on, graphed=False)  # type: ignore[arg-type]
    before = ema.module[0].weight.clone()
    _moved(net)
    ema.update()
    assert torch.equal(ema.module[0].weight, 0.5 * before + 0.5 * net[0].weight)


def test_model_ema_average_rule_blends_batchnorm_statistics() -> None:
    net = _net()
    ema = ModelEMA(net, decay=0.5, tau=0.0, buffers="average", graphed=False)
    _moved(net)
    ema.update()
    expected = 0.5 * torch.zeros(3) + 0.5 * net[1].running_mean
    assert torch.equal(ema.module[1].running_mean, expected)


def test_model_ema_copy_rule_copies_batchnorm_statistics() -> None:
    net = _net()
    ema = ModelEMA(net, decay=0.5, tau=0.0, buffers="copy", graphed=False)
    _moved(net)
    ema.update()
    assert torch.equal(ema.module[1].running_mean, net[1].running_mean)
    assert torch.equal(ema.module[1].running_var, net[1].running_var)


@pytest.mark.parametrize("buffers", ["average", "copy"])
def test_model_ema_copies_integer_buffers(buffers: str) -> None:
    net = _net()
    ema = ModelEMA(net, buffers=buffers, graphed=False)  # type: ignore[arg-type]
    _moved(net)
    ema.update()
    assert int(ema.module[1].num_batches_tracked) == 1


@pytest.mark.parametrize("decay_on", ["host", "device"])
def test_model_ema_replay_matches_native(decay_on: str) -> None:
    net_a, net_b = _net(), _net()
    options = {"tau": 3.0, "decay_on": decay_on}
    native = ModelEMA(net_a, graphed=False, **options)  # type: ignore[arg-type]
    replayed = ModelEMA(net_b, **options)  # type: ignore[arg-type]
    for _ in range(4):
        for net in (net_a, net_b):
            with torch.no_grad():
                net[0].weight.mul_(1.1)
        native.update()
        replayed.update()
    assert first_difference(state_digest(native), state_digest(replayed)) is None
    assert replayed.telemetry.replays == 3


def test_model_ema_device_counter_is_state_of_the_graphed_update() -> None:
    ema = ModelEMA(_net(), decay_on="device")
    assert any(t is ema.updates for t in ema.state_tensors())


def test_model_ema_rebind_rejects_a_model_of_another_structure() -> None:
    ema = ModelEMA(_net(), graphed=False)
    ema.live = nn.Linear(3, 3)
    with pytest.raises(ReplayConfigError, match="build the EMA from the model it averages"):
        ema.rebind()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"decay": 1.5}, "decay=1.5"),
        ({"tau": -1.0}, "tau=-1.0"),
        ({"decay_on": "gpu"}, "decay_on='gpu'"),
        ({"buffers": "ignore"}, "buffers='ignore'"),
    ],
)
def test_model_ema_rejects_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ReplayConfigError, match=message):
        ModelEMA(_net(), **kwargs)  # type: ignore[arg-type]
