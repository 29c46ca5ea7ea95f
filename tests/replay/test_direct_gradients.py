"""CPU tests of ``RegionRecorder(direct_gradients=True)``: the replayed backward writes ``.grad``.

The same rules as the hand-off to ``AccumulateGrad`` (invariants 2-5), so the comparisons are
with native training bit for bit; what differs is that the parameters have no edge in the
replayed graph, which the first test pins.
"""

from __future__ import annotations

import copy

import pytest
import torch
from replay_nets import SmallNet, loss_of, make_net, train_digest
from torch import Tensor, nn

from lucid_yolo.replay import (
    ModuleRegion,
    RegionRecorder,
    ReplayPool,
    ReplayRetiredWarning,
    RetireReason,
    first_difference,
    grads_of,
    state_digest,
)


def _direct(net: nn.Module, **options: int) -> RegionRecorder:
    return RegionRecorder(ModuleRegion(net), direct_gradients=True, **options)


def _x() -> Tensor:
    return torch.randn(2, 3, 8, 8)


def test_direct_replay_gives_autograd_no_parameter_edge() -> None:
    net = make_net()
    recorder = _direct(net, warmup_steps=0)
    out = recorder(_x())
    edges = out["a.box"].grad_fn.next_functions
    assert len(edges) == 1  # the anchor; the images need no gradient
    accumulators = {id(torch.autograd.graph.get_gradient_edge(p).node) for p in net.parameters()}
    assert not accumulators & {id(node) for node, _ in edges}
    loss_of(out, torch.randn(2, 4, 8, 8)).backward()
    assert all(p.grad is not None for p in net.parameters())
    assert recorder.telemetry.replays == 1


@pytest.mark.parametrize(("accumulation", "set_to_none"), [(1, True), (3, True), (2, False)])
def test_direct_replay_matches_native(accumulation: int, set_to_none: bool) -> None:
    native, replayed = make_net(), make_net()
    recorder = _direct(replayed)
    expected = train_digest(native, native, 3, accumulation, set_to_none)
    got = train_digest(replayed, recorder, 3, accumulation, set_to_none)
    assert first_difference(expected, got) is None
    assert recorder.telemetry.replays == 3 * accumulation - 1
    assert recorder.retired is None


def test_direct_replay_matches_native_with_parameter_used_twice_inside() -> None:
    native, replayed = make_net(shared_twice=True), make_net(shared_twice=True)
    recorder = _direct(replayed)
    expected = train_digest(native, native, 2, 2)
    assert first_difference(expected, train_digest(replayed, recorder, 2, 2)) is None
    assert recorder.retired is None


def test_direct_first_gradient_is_private_and_keeps_negative_zero() -> None:
    def linear() -> nn.Linear:
        layer = nn.Linear(3, 2, bias=False)
        with torch.no_grad():
            layer.weight.fill_(0.5)
        return layer

    eager, replayed = linear(), linear()
    recorder = RegionRecorder(
        ModuleRegion(_Wrapped(replayed)), warmup_steps=0, direct_gradients=True
    )
    x, scale = torch.tensor([[0.0, 1.0, 2.0]]), torch.tensor([[1.0, -1.0]])
    (eager(x) * scale).sum().backward()
    (recorder(x)["y"] * scale).sum().backward()
    grad, expected = replayed.weight.grad, eager.weight.grad
    assert grad is not None
    assert expected is not None
    assert bool(expected.signbit()[1, 0])  # -1 * 0.0: a negative zero that zeros + g would lose
    assert torch.equal(grad.signbit(), expected.signbit())
    assert torch.equal(grad, expected)
    statics = [
        g.data_ptr()
        for rec in recorder._recordings.values()
        for grads in rec.graphs.static_grads.values()
        for g in grads
        if g is not None
    ]
    assert grad.data_ptr() not in statics


class _Wrapped(nn.Module):
    """A linear layer whose output is a dict, as regions return."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.linear = linear

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        return {"y": self.linear(x)}


def test_direct_replay_reuses_the_gradient_nothing_else_holds() -> None:
    net = make_net()
    recorder = _direct(net, warmup_steps=0)
    addresses = []
    for _ in range(3):
        net.zero_grad(set_to_none=True)
        loss_of(recorder(_x()), torch.randn(2, 4, 8, 8)).backward()
        addresses.append([p.grad.data_ptr() for p in net.parameters() if p.grad is not None])
    assert addresses[1] == addresses[2]
    held = net.head_a.weight.grad
    net.zero_grad(set_to_none=True)
    loss_of(recorder(_x()), torch.randn(2, 4, 8, 8)).backward()
    assert held is not None
    assert net.head_a.weight.grad is not None
    assert net.head_a.weight.grad.data_ptr() != held.data_ptr()


@pytest.mark.parametrize("outside_first", [True, False])
def test_direct_replay_retires_when_a_parameter_is_used_outside(outside_first: bool) -> None:
    net = make_net()
    recorder = _direct(net, warmup_steps=0)
    for _ in range(2):
        recorder(_x())["a.box"].sum().backward()
    assert recorder.retired is None
    outside = net.head_a.weight.square().sum()
    out = recorder(_x())["a.box"].sum()
    loss = outside + out if outside_first else out + outside
    with pytest.warns(ReplayRetiredWarning, match="shared-parameter"):
        loss.backward()
    assert recorder.retired is not None
    assert recorder.retired.reason is RetireReason.SHARED_PARAMETER
    assert recorder.telemetry.retirements[RetireReason.SHARED_PARAMETER] == 1


def test_direct_replay_ignores_native_backwards_of_its_parameters() -> None:
    net = make_net()
    recorder = _direct(net, warmup_steps=0)
    recorder(_x())["a.box"].sum().backward()
    net(_x())["a.box"].sum().backward()
    recorder(_x())["a.box"].sum().backward()
    assert recorder.retired is None
    assert recorder.telemetry.replays == 2


def test_direct_replay_retires_when_an_input_is_used_outside() -> None:
    recorder = _direct(make_net(), warmup_steps=0)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    features = x * 2.0
    out = recorder(features)
    with pytest.warns(ReplayRetiredWarning, match="shared-input"):
        (out["a.box"].sum() + features.sum()).backward()
    assert recorder.retired is not None
    assert recorder.retired.reason is RetireReason.SHARED_INPUT


def test_direct_replay_input_gradient_matches_native() -> None:
    native, replayed = make_net(), make_net()
    recorder = _direct(replayed, warmup_steps=0)
    x = torch.randn(2, 3, 8, 8)
    xn, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    for step in range(2):
        torch.manual_seed(step)
        native(xn)["a.box"].sum().backward()
        torch.manual_seed(step)
        recorder(xr)["a.box"].sum().backward()
    assert xn.grad is not None
    assert xr.grad is not None
    assert torch.equal(xn.grad, xr.grad)
    assert (
        first_difference(state_digest(grads_of(native)), state_digest(grads_of(replayed))) is None
    )


def test_direct_chained_regions_match_native() -> None:
    torch.manual_seed(0)
    head_n, tail_n = SmallNet(), nn.Sequential(nn.Conv2d(4, 3, 3, padding=1), nn.BatchNorm2d(3))
    head_r, tail_r = copy.deepcopy(head_n), copy.deepcopy(tail_n)
    pool = ReplayPool("cpu")
    first = RegionRecorder(ModuleRegion(head_r), pool=pool, warmup_steps=0, direct_gradients=True)
    second = RegionRecorder(
        ModuleRegion(_Tail(tail_r)), pool=pool, warmup_steps=0, name="tail", direct_gradients=True
    )
    for step in range(3):
        x = torch.randn(2, 3, 8, 8)
        torch.manual_seed(step)
        tail_n(head_n(x)["a.box"]).square().mean().backward()
        torch.manual_seed(step)
        second(first(x)["a.box"])["y"].square().mean().backward()
    expected = state_digest(
        {"h": head_n, "t": tail_n, "g": grads_of(head_n), "u": grads_of(tail_n)}
    )
    got = state_digest({"h": head_r, "t": tail_r, "g": grads_of(head_r), "u": grads_of(tail_r)})
    assert first_difference(expected, got) is None
    assert (first.telemetry.replays, second.telemetry.replays) == (3, 3)


class _Tail(nn.Module):
    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        return {"y": self.body(x)}


def test_direct_gradients_may_change_between_steps() -> None:
    native, replayed = make_net(), make_net()
    recorder = RegionRecorder(ModuleRegion(replayed))
    modes = iter([False, True, False, True, True, False])

    def forward(x: Tensor) -> dict[str, Tensor]:
        recorder.direct_gradients = next(modes)
        return recorder(x)

    expected = train_digest(native, native, 3, 2)
    assert first_difference(expected, train_digest(replayed, forward, 3, 2)) is None
    assert recorder.retired is None
