"""CPU tests of the module wrapper."""

from __future__ import annotations

import torch
from replay_nets import make_net

from lucid_yolo.replay import ReplayModule


def test_replay_module_records_in_training_and_runs_native_without_grad() -> None:
    wrapper = ReplayModule(make_net(), warmup_steps=0)
    wrapper(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    with torch.no_grad():
        wrapper(torch.randn(2, 3, 8, 8))
    assert wrapper.telemetry.replays == 1
    assert wrapper.telemetry.native_calls["no-grad"] == 1


def test_replay_module_output_equals_module_output() -> None:
    net = make_net()
    wrapper = ReplayModule(net, warmup_steps=0).eval()
    x = torch.randn(2, 3, 8, 8)
    got = wrapper(x)["b.box"].detach()
    assert torch.equal(got, net(x)["b.box"].detach())


def test_replay_module_state_dict_prefixes_module() -> None:
    net = make_net()
    wrapper = ReplayModule(net)
    assert set(wrapper.state_dict()) == {f"module.{k}" for k in net.state_dict()}
    assert "recorder" not in dict(wrapper.named_children())
