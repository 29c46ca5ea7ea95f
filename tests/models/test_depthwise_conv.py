"""The depthwise convolution whose input gradient runs through the rotated filters."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lucid_yolo.models import create_model
from lucid_yolo.models.conv import ConvBnAct, depthwise
from lucid_yolo.models.depthwise_conv import DepthwiseConv2d, rotated_filter_depthwise


def _plain_grads(
    x: torch.Tensor, weight: torch.Tensor, padding: int, grad: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = x.detach().clone().requires_grad_()
    weight = weight.detach().clone().requires_grad_()
    out = F.conv2d(x, weight, None, 1, padding, 1, weight.shape[0])
    out.backward(grad)
    assert x.grad is not None and weight.grad is not None
    return out, x.grad, weight.grad


@pytest.mark.parametrize("kernel", [1, 3, 5])
def test_rotated_filters_give_the_convolutions_gradients(kernel: int) -> None:
    generator = torch.Generator().manual_seed(kernel)
    x = torch.randn(2, 6, 9, 11, dtype=torch.float64, generator=generator, requires_grad=True)
    weight = torch.randn(6, 1, kernel, kernel, dtype=torch.float64, generator=generator)
    weight.requires_grad_()
    out = rotated_filter_depthwise(x, weight, kernel // 2)
    grad = torch.randn(out.shape, dtype=torch.float64, generator=generator)
    out.backward(grad)
    plain_out, plain_x_grad, plain_weight_grad = _plain_grads(x, weight, kernel // 2, grad)
    assert torch.equal(out, plain_out)
    assert torch.equal(weight.grad, plain_weight_grad)
    torch.testing.assert_close(x.grad, plain_x_grad, rtol=1e-12, atol=1e-12)


def test_only_the_gradients_asked_for_are_computed() -> None:
    x = torch.randn(1, 4, 8, 8, dtype=torch.float64)
    weight = torch.randn(4, 1, 3, 3, dtype=torch.float64, requires_grad=True)
    rotated_filter_depthwise(x, weight, 1).sum().backward()
    assert x.grad is None and weight.grad is not None
    x.requires_grad_()
    frozen = weight.detach()
    rotated_filter_depthwise(x, frozen, 1).sum().backward()
    assert x.grad is not None and frozen.grad is None


def test_conv_unit_uses_it_for_stride_one_depthwise_only() -> None:
    assert type(depthwise(8).conv) is DepthwiseConv2d
    assert type(ConvBnAct(8, 8, 3, groups=8, act=False).conv) is DepthwiseConv2d
    assert type(ConvBnAct(8, 8, 3, 2, groups=8).conv) is nn.Conv2d
    assert type(ConvBnAct(8, 16, 3, groups=8).conv) is nn.Conv2d
    assert type(ConvBnAct(8, 8, 2, groups=8).conv) is nn.Conv2d
    assert type(ConvBnAct(8, 8, 3).conv) is nn.Conv2d


def test_even_kernel_is_refused() -> None:
    with pytest.raises(ValueError, match="odd kernel"):
        DepthwiseConv2d(8, 4)


def test_it_is_a_conv2d_with_the_plain_initialisation_and_state() -> None:
    torch.manual_seed(3)
    conv = DepthwiseConv2d(16, 3)
    torch.manual_seed(3)
    plain = nn.Conv2d(16, 16, 3, 1, padding=1, groups=16, bias=False)
    assert isinstance(conv, nn.Conv2d)
    assert conv.state_dict().keys() == plain.state_dict().keys()
    assert torch.equal(conv.weight, plain.weight)


def test_cpu_training_forward_is_the_plain_convolution() -> None:
    conv = DepthwiseConv2d(4, 3)
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    out = conv(x)
    assert out.grad_fn is not None and "Convolution" in type(out.grad_fn).__name__


def test_packaged_networks_hold_depthwise_convs() -> None:
    for name in ("yolo26n", "yolo26n-seg"):
        model = create_model(name, num_classes=3)
        assert any(isinstance(m, DepthwiseConv2d) for m in model.modules()), name


@pytest.mark.gpu
@pytest.mark.parametrize("requires_grad", [True, False])
def test_cuda_bf16_channels_last_forward_and_weight_grad_are_the_plain_bits(
    requires_grad: bool,
) -> None:
    torch.manual_seed(0)
    conv = DepthwiseConv2d(64, 3).cuda().to(memory_format=torch.channels_last)
    plain = nn.Conv2d(64, 64, 3, 1, padding=1, groups=64, bias=False).cuda()
    plain = plain.to(memory_format=torch.channels_last)
    plain.load_state_dict(conv.state_dict())
    source = torch.randn(4, 64, 40, 40, device="cuda", dtype=torch.bfloat16)
    source = source.to(memory_format=torch.channels_last)
    outputs, inputs = [], []
    for module, rotated in ((conv, True), (plain, False)):
        x = source.clone().requires_grad_(requires_grad)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = module(x)
        name = type(out.grad_fn).__name__
        assert ("RotatedFilter" in name) == (rotated and requires_grad), name
        out.backward(torch.ones_like(out))
        outputs.append(out)
        inputs.append(x)
    assert outputs[0].dtype == torch.bfloat16
    assert outputs[0].is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(outputs[0], outputs[1])
    assert conv.weight.grad is not None and plain.weight.grad is not None
    assert conv.weight.grad.dtype == torch.float32
    assert torch.equal(conv.weight.grad, plain.weight.grad)
    if requires_grad:
        grads = [x.grad for x in inputs]
        assert grads[0] is not None and grads[1] is not None
        assert grads[0].dtype == torch.bfloat16
        torch.testing.assert_close(grads[0], grads[1], rtol=1e-2, atol=1e-2)
