"""Gradient hand-off to AccumulateGrad (docs/replay-invariants.md, invariants 2 and 3)."""

from __future__ import annotations

import pytest
import torch
from dispatched_ops import DispatchedOps
from torch import nn

from lucid_yolo.replay import _autograd
from lucid_yolo.replay._autograd import reached_targets, route


def test_route_first_gradient_keeps_negative_zero() -> None:
    weight = nn.Parameter(torch.ones(2, 3))
    static = torch.full((2, 3), -0.0)
    (handed,) = route([weight], [static], private=False)
    assert handed is not None
    assert torch.equal(handed.view(torch.int32), static.view(torch.int32))
    assert handed.data_ptr() != static.data_ptr()


def test_route_first_gradient_has_the_parameter_strides() -> None:
    weight = nn.Parameter(torch.ones(3, 2).t())
    (handed,) = route([weight], [torch.randn(2, 3)], private=False)
    assert handed is not None
    assert handed.stride() == weight.stride()


def test_route_later_gradient_is_the_static_buffer() -> None:
    weight = nn.Parameter(torch.ones(2, 3))
    weight.grad = torch.zeros(2, 3)
    static = torch.randn(2, 3)
    assert route([weight], [static], private=False)[0] is static


def test_route_non_leaf_gradient_keeps_the_recorded_layout() -> None:
    # A chained region's input (an upstream region's output) gets the layout the recorded
    # backward produced, as native autograd passes it on, not the input's own strides.
    features = torch.ones(2, 4, 3, requires_grad=True) * 1.0  # non-leaf, (12, 3, 1)
    static = torch.randn(2, 3, 4).transpose(1, 2)  # (12, 1, 4)
    (handed,) = route([features], [static], private=False)
    assert handed is not None
    assert handed.stride() == static.stride()
    assert handed.data_ptr() != static.data_ptr()
    assert torch.equal(handed, static)


def test_route_makes_every_private_gradient_in_one_call_into_torch() -> None:
    weights = [
        nn.Parameter(torch.ones(2, 3)),
        nn.Parameter(torch.ones(4)),
        nn.Parameter(torch.ones(1)),
    ]
    weights[2].grad = torch.zeros(1)  # a later micro-batch: handed the static buffer, no copy
    statics = [torch.randn(2, 3), torch.randn(4), torch.randn(1)]
    with DispatchedOps() as seen:
        handed = route(weights, statics, private=False)
    if _autograd._FOREACH_CLONE is not None:
        assert seen.ops == {"_foreach_clone": 1}
    else:  # torch before _foreach_clone: an allocation each, one grouped copy
        assert seen.ops == {"empty_like": 2, "_foreach_copy_": 1}
    assert handed[2] is statics[2]
    for h, s in zip(handed[:2], statics[:2], strict=True):
        assert h is not None
        assert h.data_ptr() != s.data_ptr()
        assert torch.equal(h.view(torch.int32), s.view(torch.int32))


def test_route_gives_a_parameter_of_other_strides_its_own_tensor_in_the_grouped_copy() -> None:
    # The clone takes the static's layout: a transposed parameter gets its own strides, filled
    # by the one grouped copy; the parameter whose strides match is cloned.
    transposed, plain = nn.Parameter(torch.ones(3, 2).t()), nn.Parameter(torch.ones(2, 3))
    statics = [torch.randn(2, 3), torch.randn(2, 3)]
    with DispatchedOps() as seen:
        handed = route([transposed, plain], statics, private=False)
    assert seen.ops["_foreach_copy_"] == 1
    assert seen.ops["_foreach_clone"] == (1 if _autograd._FOREACH_CLONE is not None else 0)
    for h, live, s in zip(handed, [transposed, plain], statics, strict=True):
        assert h is not None
        assert h.stride() == live.stride()
        assert torch.equal(h, s)


def test_route_overwrites_spares_of_the_parameters_layout_and_dtype() -> None:
    weights = [nn.Parameter(torch.ones(2, 3)) for _ in range(4)]
    weights[3].grad = torch.zeros(2, 3)  # a later micro-batch: the static, its spare unused
    statics = [torch.randn(2, 3) for _ in weights]
    statics[0][0, 0] = -0.0
    spares = [
        torch.empty(2, 3),  # used
        torch.empty(2, 3, dtype=torch.float64),  # another dtype: refused
        torch.empty(3, 2).t(),  # other strides: refused
        torch.empty(2, 3),
    ]
    with DispatchedOps() as seen:
        handed = route(weights, statics, private=False, spares=spares)
    assert seen.ops["_foreach_copy_"] == 1
    assert handed[0] is spares[0]
    assert torch.equal(spares[0].view(torch.int32), statics[0].view(torch.int32))
    for k in (1, 2):
        h = handed[k]
        assert h is not None
        assert h is not spares[k]
        assert h.dtype == statics[k].dtype
        assert h.stride() == weights[k].stride()
        assert torch.equal(h, statics[k])
    assert handed[3] is statics[3]


def test_route_private_hand_off_uses_a_spare_even_where_grad_is_set() -> None:
    weight = nn.Parameter(torch.ones(2, 3))
    weight.grad = torch.zeros(2, 3)
    static, spare = torch.randn(2, 3), torch.empty(2, 3)
    (handed,) = route([weight], [static], private=True, spares=[spare])
    assert handed is spare
    assert torch.equal(spare, static)


def test_route_without_foreach_clone_hands_the_same_layouts_and_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # torch releases before _foreach_clone: an empty_like each and one grouped copy.
    def hand_off() -> list[torch.Tensor | None]:
        torch.manual_seed(0)
        features = torch.ones(2, 4, 3, requires_grad=True) * 1.0
        weights = [nn.Parameter(torch.ones(3, 2).t()), nn.Parameter(torch.ones(5))]
        statics = [torch.randn(2, 3, 4).transpose(1, 2), torch.randn(2, 3), torch.randn(5)]
        statics[2][0] = -0.0
        return list(route([features, *weights], statics, private=False))

    with_clone = hand_off()
    monkeypatch.setattr(_autograd, "_FOREACH_CLONE", None)
    with DispatchedOps() as seen:
        without = hand_off()
    assert seen.ops["_foreach_clone"] == 0
    assert seen.ops["_foreach_copy_"] == 1
    for a, b in zip(with_clone, without, strict=True):
        assert a is not None
        assert b is not None
        assert a.stride() == b.stride()
        assert torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_route_private_copies_for_parameters_that_hold_a_gradient() -> None:
    weight = nn.Parameter(torch.ones(2, 3))
    weight.grad = torch.zeros(2, 3)
    static = torch.randn(2, 3)
    (handed,) = route([weight], [static], private=True)
    assert handed is not None
    assert handed.data_ptr() != static.data_ptr()
    assert torch.equal(handed, static)


@pytest.mark.gpu
def test_route_on_cuda_hands_adoptable_copies_in_the_parameters_layouts() -> None:
    # Channels-last and plain parameters, as a fit's network has them, and a later-micro-batch
    # parameter: the copies keep each parameter's strides and the statics' bits, and
    # AccumulateGrad adopts them without a copy of its own.
    conv = nn.Parameter(
        torch.randn(8, 4, 3, 3, device="cuda").to(memory_format=torch.channels_last)
    )
    bias, held = (
        nn.Parameter(torch.randn(8, device="cuda")),
        nn.Parameter(torch.randn(5, device="cuda")),
    )
    held.grad = torch.ones(5, device="cuda")
    statics = [torch.randn_like(conv), torch.randn(8, device="cuda"), torch.randn(5, device="cuda")]
    statics[1][0] = -0.0
    handed_ptrs: list[int] = []

    class Region(torch.autograd.Function):
        @staticmethod
        def forward(ctx: object, *params: torch.Tensor) -> torch.Tensor:
            return sum(p.sum() for p in params).detach()  # type: ignore[return-value]

        @staticmethod
        def backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
            handed = route([conv, bias, held], statics, private=False)
            handed_ptrs.extend(h.data_ptr() for h in handed[:2] if h is not None)
            return handed

    Region.apply(conv, bias, held).backward()
    assert conv.grad is not None
    assert bias.grad is not None
    assert held.grad is not None
    assert conv.grad.stride() == conv.stride()
    assert [conv.grad.data_ptr(), bias.grad.data_ptr()] == handed_ptrs
    for grad, static in ((conv.grad, statics[0]), (bias.grad, statics[1])):
        assert grad.data_ptr() != static.data_ptr()
        assert torch.equal(grad.view(torch.int32), static.view(torch.int32))
    assert torch.equal(held.grad, 1.0 + statics[2])


def test_route_hands_none_where_the_backward_gave_none() -> None:
    weight = nn.Parameter(torch.ones(2))
    assert route([weight], [None], private=True) == (None,)


def test_replayed_first_gradient_is_adopted_without_a_copy() -> None:
    # AccumulateGrad adopts the private tensor route hands it: .grad is that tensor, no clone.
    weight, bias = nn.Parameter(torch.randn(3, 4)), nn.Parameter(torch.randn(4))
    statics = [torch.randn(3, 4), torch.randn(4)]
    handed_ptrs: list[int] = []

    class Region(torch.autograd.Function):
        @staticmethod
        def forward(ctx: object, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return (w.sum() + b.sum()).detach()

        @staticmethod
        def backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
            handed = route([weight, bias], statics, private=False)
            handed_ptrs.extend(h.data_ptr() for h in handed if h is not None)
            return handed

    Region.apply(weight, bias).backward()
    assert weight.grad is not None
    assert bias.grad is not None
    assert [weight.grad.data_ptr(), bias.grad.data_ptr()] == handed_ptrs
    assert torch.equal(weight.grad, statics[0])
    assert torch.equal(bias.grad, statics[1])


def test_reached_targets_splits_heads_by_output() -> None:
    net = nn.ModuleDict({"a": nn.Linear(3, 2), "b": nn.Linear(3, 2)})
    x = torch.randn(4, 3)
    outputs = (net["a"](x), net["b"](x))
    targets = list(net.parameters())  # a.weight, a.bias, b.weight, b.bias
    zeros = {i: torch.zeros_like(o) for i, o in enumerate(outputs)}
    assert reached_targets(outputs, (0, 1), targets, zeros) == {
        0: frozenset({0, 1}),
        1: frozenset({2, 3}),
    }


def test_reached_targets_of_a_deep_network_cover_every_parameter() -> None:
    # The reverted walk over grad_fn ids could lose targets on deep graphs; autograd's own
    # answer reaches every trunk parameter from both heads and each head's only from its own.
    trunk = nn.Sequential(
        *(nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.SiLU()) for _ in range(40))
    )
    heads = nn.ModuleList(nn.Conv2d(4, 2, 1) for _ in range(2))
    features = trunk(torch.randn(1, 4, 8, 8))
    outputs = tuple(head(features) for head in heads)
    targets = [*trunk.parameters(), *heads.parameters()]
    zeros = {i: torch.zeros_like(o) for i, o in enumerate(outputs)}
    reach = reached_targets(outputs, (0, 1), targets, zeros)
    trunk_positions = frozenset(range(80))
    assert reach == {
        0: trunk_positions | {80, 81},
        1: trunk_positions | {82, 83},
    }
