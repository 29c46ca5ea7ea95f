"""CPU tests of ``RegionRecorder(direct_gradients=True)``: the replayed backward writes ``.grad``.

The same rules as the hand-off to ``AccumulateGrad`` (invariants 2-5), so the comparisons are
with native training bit for bit; what differs is that the parameters have no edge in the
replayed graph, which the first test pins.
"""

from __future__ import annotations

import copy
from typing import Any

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
    recorder = RegionRecorder(ModuleRegion(_Keyed(replayed)), warmup_steps=0, direct_gradients=True)
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


class _Keyed(nn.Module):
    """A module whose output is a dict, as regions return."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        return {"y": self.body(x)}


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


@pytest.mark.parametrize("outside_before_region", [True, False])
def test_direct_replay_retires_when_a_parameter_is_used_outside(
    outside_before_region: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = make_net()
    recorder = _direct(net, warmup_steps=0)
    for _ in range(2):
        recorder(_x())["a.box"].sum().backward()
    assert recorder.retired is None
    # autograd runs later-made nodes first: an outside use made after the region's forward
    # reaches the parameter's own node before the region's backward runs, one made before it
    # after
    grad_at_write: list[bool] = []
    write = RegionRecorder._write_gradients

    def spied(self: RegionRecorder, *args: Any) -> Any:
        grad_at_write.append(net.head_a.weight.grad is not None)
        return write(self, *args)

    monkeypatch.setattr(RegionRecorder, "_write_gradients", spied)
    net.zero_grad(set_to_none=True)
    if outside_before_region:
        outside = net.head_a.weight.square().sum()
        loss = recorder(_x())["a.box"].sum() + outside
    else:
        region = recorder(_x())["a.box"].sum()
        loss = region + net.head_a.weight.square().sum()
    with pytest.warns(ReplayRetiredWarning, match="shared-parameter"):
        loss.backward()
    assert grad_at_write == [not outside_before_region]
    assert recorder.retired is not None
    assert recorder.retired.reason is RetireReason.SHARED_PARAMETER
    assert recorder.telemetry.retirements[RetireReason.SHARED_PARAMETER] == 1


def test_direct_replays_writing_one_parameter_twice_in_a_backward_retire() -> None:
    shared = nn.Linear(16, 16)
    first = nn.Sequential(nn.Linear(16, 16), shared)
    second = nn.Sequential(shared, nn.Tanh(), nn.Linear(16, 16))
    pool = ReplayPool("cpu")
    a = RegionRecorder(
        ModuleRegion(_Keyed(first)), pool=pool, warmup_steps=0, direct_gradients=True
    )
    b = RegionRecorder(
        ModuleRegion(_Keyed(second)), pool=pool, warmup_steps=0, direct_gradients=True, name="b"
    )
    with pytest.warns(ReplayRetiredWarning, match="shared-parameter.*another replayed region"):
        b(a(torch.randn(4, 16))["y"])["y"].square().sum().backward()
    assert a.retired is not None or b.retired is not None


def test_direct_replay_writes_no_gradient_in_an_autograd_grad_pass() -> None:
    native, replayed = make_net(), make_net()
    recorder = _direct(replayed, warmup_steps=0)
    x = torch.randn(2, 3, 8, 8)
    for forward in (native, recorder):
        torch.manual_seed(0)
        forward(x)["a.box"].sum().backward()
    replayed.zero_grad(set_to_none=True)
    xn, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch.manual_seed(1)
    (expected,) = torch.autograd.grad(native(xn)["a.box"].sum(), xn)
    torch.manual_seed(1)
    (got,) = torch.autograd.grad(recorder(xr)["a.box"].sum(), xr)
    assert torch.equal(expected, got)
    recorder(xr)["a.box"].sum().backward(inputs=[xr])
    assert all(p.grad is None for p in replayed.parameters())
    assert recorder.telemetry.replays == 3


def test_direct_replay_leaves_a_parameter_that_stopped_requiring_grad() -> None:
    net = make_net()
    recorder = _direct(net, warmup_steps=0)
    recorder(_x())["a.box"].sum().backward()
    net.zero_grad(set_to_none=True)
    out = recorder(_x())["a.box"].sum()
    net.head_a.weight.requires_grad_(False)
    out.backward()
    assert net.head_a.weight.grad is None
    assert net.head_a.bias.grad is not None


def test_direct_later_micro_batch_adds_into_the_same_tensor() -> None:
    net = make_net()
    recorder = _direct(net, warmup_steps=0)
    loss_of(recorder(_x()), torch.randn(2, 4, 8, 8)).backward()
    first = {name: (p.grad, p.grad.clone()) for name, p in net.named_parameters()}
    loss_of(recorder(_x()), torch.randn(2, 4, 8, 8)).backward()
    for name, p in net.named_parameters():
        held, before = first[name]
        assert p.grad is held
        assert not torch.equal(p.grad, before)


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph")
def test_direct_later_micro_batch_under_create_graph_makes_a_new_tensor() -> None:
    net = make_net()
    recorder = _direct(net, warmup_steps=0)
    loss_of(recorder(_x()), torch.randn(2, 4, 8, 8)).backward()
    held = net.head_a.weight.grad
    assert held is not None
    before = held.clone()
    loss_of(recorder(_x()), torch.randn(2, 4, 8, 8)).backward(create_graph=True)
    assert net.head_a.weight.grad is not held
    assert torch.equal(held, before)


def test_direct_replay_lets_go_of_a_kept_gradient_replaced_by_the_caller() -> None:
    net = make_net()
    recorder = _direct(net, warmup_steps=0)
    loss_of(recorder(_x()), torch.randn(2, 4, 8, 8)).backward()
    kept = list(recorder._recycler._kept)
    assert all(k is not None for k in kept)
    for p in net.parameters():
        p.grad = torch.zeros_like(p)  # what restoring a snapshot of the gradients does
    loss_of(recorder(_x()), torch.randn(2, 4, 8, 8)).backward()
    assert all(k is None for k in recorder._recycler._kept[: len(kept)])


def test_direct_retirement_removes_the_watch_hooks() -> None:
    net = make_net()
    recorder = _direct(net, warmup_steps=0)
    recorder(_x())["a.box"].sum().backward()
    with pytest.warns(ReplayRetiredWarning):
        recorder.retire(RetireReason.PARAMETER_REPLACED, "a test retires it")
    net(_x())["a.box"].sum().backward()  # natively every parameter's node runs
    assert recorder._outside._used == []


def test_direct_replay_ignores_native_backwards_of_its_parameters() -> None:
    net = make_net()
    recorder = _direct(net, warmup_steps=0)
    recorder(_x())["a.box"].sum().backward()
    net(_x())["a.box"].sum().backward()
    recorder(_x())["a.box"].sum().backward()
    assert recorder.retired is None
    assert recorder.telemetry.replays == 2


def test_direct_chained_regions_match_native() -> None:
    torch.manual_seed(0)
    head_n, tail_n = SmallNet(), nn.Sequential(nn.Conv2d(4, 3, 3, padding=1), nn.BatchNorm2d(3))
    head_r, tail_r = copy.deepcopy(head_n), copy.deepcopy(tail_n)
    pool = ReplayPool("cpu")
    first = RegionRecorder(ModuleRegion(head_r), pool=pool, warmup_steps=0, direct_gradients=True)
    second = RegionRecorder(
        ModuleRegion(_Keyed(tail_r)), pool=pool, warmup_steps=0, name="tail", direct_gradients=True
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
