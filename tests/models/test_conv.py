"""The conv unit's depthwise convolutions computed in NCHW inside a channels-last network."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from lucid_yolo.models import ConvBnAct, compute_depthwise_in_nchw, create_model
from lucid_yolo.models import conv as conv_module

CHANNELS_LAST = torch.channels_last


def _depthwise_unit() -> ConvBnAct:
    torch.manual_seed(0)
    unit = ConvBnAct(8, 8, 3, groups=8).eval()
    return unit.to(memory_format=CHANNELS_LAST)


def _spy_conv2d(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Tensor, Tensor]]:
    calls: list[tuple[Tensor, Tensor]] = []
    conv2d = conv_module.F.conv2d

    def spy(x: Tensor, weight: Tensor, *args: Any) -> Tensor:
        calls.append((x, weight))
        return conv2d(x, weight, *args)

    monkeypatch.setattr(conv_module.F, "conv2d", spy)
    return calls


def test_compute_depthwise_in_nchw_sets_exactly_the_depthwise_units() -> None:
    model = create_model("yolo26n")
    assert compute_depthwise_in_nchw(model, True) == 14
    units = [m for m in model.modules() if isinstance(m, ConvBnAct)]
    assert {u.nchw_when_channels_last for u in units if u.is_depthwise} == {True}
    assert {u.nchw_when_channels_last for u in units if not u.is_depthwise} == {False}
    compute_depthwise_in_nchw(model, False)
    assert not any(u.nchw_when_channels_last for u in units)


def test_depthwise_unit_convolves_nchw_copies_and_answers_in_channels_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unit = _depthwise_unit()
    x = torch.randn(2, 8, 6, 6).contiguous(memory_format=CHANNELS_LAST)
    with torch.no_grad():
        reference = unit(x)
        compute_depthwise_in_nchw(unit, True)
        calls = _spy_conv2d(monkeypatch)
        result = unit(x)
    assert len(calls) == 1
    seen, weight = calls[0]
    assert seen.is_contiguous()
    assert seen.stride() == (288, 36, 6, 1)
    # (8, 1, 3, 3): NCHW strides, not the channels-last (9, 1, 3, 1) of the parameter
    assert weight.stride() == (9, 9, 3, 1)
    assert unit.conv.weight.stride() == (9, 1, 3, 1)
    assert result.is_contiguous(memory_format=CHANNELS_LAST)
    assert not result.is_contiguous()
    torch.testing.assert_close(result, reference, rtol=1e-5, atol=1e-6)


def test_depthwise_unit_convolves_an_nchw_input_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unit = _depthwise_unit()
    compute_depthwise_in_nchw(unit, True)
    calls = _spy_conv2d(monkeypatch)
    x = torch.randn(2, 8, 6, 6)
    with torch.no_grad():
        unit(x)
    assert len(calls) == 1
    assert calls[0][0] is x
    assert calls[0][1] is unit.conv.weight


def test_depthwise_unit_in_nchw_passes_gradients_to_its_weight() -> None:
    x = torch.randn(2, 8, 6, 6).contiguous(memory_format=CHANNELS_LAST)
    grads = []
    for nchw in (False, True):
        unit = _depthwise_unit().train()
        compute_depthwise_in_nchw(unit, nchw)
        unit(x).square().sum().backward()
        assert unit.conv.weight.grad is not None
        grads.append(unit.conv.weight.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-5)
