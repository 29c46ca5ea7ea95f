"""Gradient hand-off to AccumulateGrad (docs/replay-invariants.md, invariants 2 and 3)."""

from __future__ import annotations

import torch
from torch import nn

from lucid_yolo.replay._autograd import route


def test_route_first_gradient_keeps_negative_zero() -> None:
    weight = nn.Parameter(torch.ones(2, 3))
    static = torch.full((2, 3), -0.0)
    handed = route(weight, static, private=False)
    assert handed is not None
    assert torch.equal(handed.view(torch.int32), static.view(torch.int32))
    assert handed.data_ptr() != static.data_ptr()


def test_route_first_gradient_has_the_parameter_strides() -> None:
    weight = nn.Parameter(torch.ones(3, 2).t())
    handed = route(weight, torch.randn(2, 3), private=False)
    assert handed is not None
    assert handed.stride() == weight.stride()


def test_route_later_gradient_is_the_static_buffer() -> None:
    weight = nn.Parameter(torch.ones(2, 3))
    weight.grad = torch.zeros(2, 3)
    static = torch.randn(2, 3)
    assert route(weight, static, private=False) is static
