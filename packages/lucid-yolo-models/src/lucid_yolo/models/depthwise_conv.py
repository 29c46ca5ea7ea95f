"""A stride-1 depthwise convolution whose input gradient is itself a depthwise convolution.

Why: cuDNN 9.10 and later answer a channels-last depthwise convolution's input gradient with an
engine it compiles at run time, once per shape and per process. On the H200 (torch 2.11, cuDNN
9.19) that compilation cost the six input-gradient shapes of yolo26n at batch 16 about 5.5 s in
a fit's first training step (``docs/engineering/whole-fit-speed.md``, sessions 9 and 25), every
run. The forward and the weight gradient of the same convolutions use precompiled kernels.

For stride 1, dilation 1 and an odd square kernel padded by ``k // 2``, the input gradient of a
depthwise convolution is the depthwise convolution of the output gradient with each filter
rotated by 180° and the same padding. Computed that way it runs cuDNN's forward kernel, which
needs no compilation. The forward and the weight gradient stay cuDNN's own calls, so their bits
do not change; the input gradient's bits may differ from the compiled engine's (another kernel
sums the same products), the same in a native fit and in a replayed one.

Only a CUDA input that needs a gradient takes this path: inference, export and the CPU run the
plain convolution.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable


class _RotatedFilterInputGrad(torch.autograd.Function):
    """Forward: the depthwise convolution; backward: the input gradient through the rotated
    filters, the weight gradient through cuDNN's weight-gradient call."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, padding: int) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.padding = padding
        return F.conv2d(x, weight, None, 1, padding, 1, weight.shape[0])

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        x, weight = ctx.saved_tensors
        padding: int = ctx.padding
        groups = weight.shape[0]
        grad_input = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_input = F.conv2d(grad, weight.flip((2, 3)), None, 1, padding, 1, groups)
        if ctx.needs_input_grad[1]:
            grad_weight = torch.ops.aten.convolution_backward(
                grad,
                x,
                weight,
                None,
                [1, 1],
                [padding, padding],
                [1, 1],
                False,
                [0, 0],
                groups,
                [False, True, False],
            )[1]
        return grad_input, grad_weight, None


def rotated_filter_depthwise(x: Tensor, weight: Tensor, padding: int) -> Tensor:
    """The stride-1 depthwise convolution of ``x`` by ``weight`` ``(C, 1, k, k)``, its input
    gradient computed through the rotated filters; ``x`` and ``weight`` in one dtype."""
    out: Tensor = _RotatedFilterInputGrad.apply(x, weight, padding)
    return out


class DepthwiseConv2d(nn.Conv2d):
    """``nn.Conv2d`` with one filter per channel, stride 1, no bias, padding ``k // 2``.

    An ``nn.Conv2d`` in everything but the training forward on CUDA (state dict, export,
    inference), where the input gradient goes through :func:`rotated_filter_depthwise`. Under
    autocast the input and the filters are cast as autocast casts a convolution's, so the
    forward's bits are the plain convolution's.
    """

    def __init__(self, channels: int, kernel_size: int) -> None:
        if kernel_size % 2 != 1:
            raise ValueError(f"kernel_size={kernel_size}: a depthwise conv here needs an odd kernel")
        super().__init__(
            channels,
            channels,
            kernel_size,
            1,
            padding=kernel_size // 2,
            groups=channels,
            bias=False,
        )
        self.half_kernel = kernel_size // 2

    def forward(self, x: Tensor) -> Tensor:
        if not (x.is_cuda and x.requires_grad and torch.is_grad_enabled()):
            return super().forward(x)
        dtype = (
            torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else x.dtype
        )
        with torch.autocast("cuda", enabled=False):
            return rotated_filter_depthwise(x.to(dtype), self.weight.to(dtype), self.half_kernel)


__all__ = ["DepthwiseConv2d", "rotated_filter_depthwise"]
