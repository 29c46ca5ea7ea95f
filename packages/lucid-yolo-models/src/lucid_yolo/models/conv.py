"""The conv → BatchNorm → SiLU unit that every YOLO26 layer is built from.

BatchNorm uses ``eps = 1e-3`` and ``momentum = 0.03`` (the YOLO family's values: a slow running
average suits the small, heavily augmented batches of detector training).

A depthwise unit can compute its convolution in NCHW inside a channels-last network
(:func:`compute_depthwise_in_nchw`). Why: PyTorch hands every channels-last depthwise
convolution to cuDNN, and cuDNN 9.19 compiles the execution plans of those at their first call.
On an H200 that took 4.6-9.8 s of a fit's first step for yolo26n (its six depthwise
configurations with an input gradient, 0.6-1.5 s each, forward and backward), against 0.8-1.3 s
for the whole first step in either layout without them. In NCHW a bf16 depthwise convolution
runs PyTorch's own kernel, which needs no compilation; the price is the two layout copies around
it and a slower kernel: 2.97 ms more per graphed forward+backward at batch 16, 0.69 ms at batch 4
(docs/engineering/whole-fit-speed.md, session 9). It pays for short fits, not long ones, so the
caller decides.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

BN_EPS = 1e-3
BN_MOMENTUM = 0.03


class ConvBnAct(nn.Module):
    """Convolution without bias, BatchNorm, optional SiLU.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        kernel_size: square kernel; padding keeps ``H, W`` at stride 1.
        stride: 2 halves ``H, W``.
        groups: convolution groups (``in_channels`` for a depthwise conv).
        act: apply SiLU; linear projections before a residual sum skip it.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 1,
        stride: int = 1,
        *,
        groups: int = 1,
        act: bool = True,
    ) -> None:
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding=kernel_size // 2,
            groups=groups,
            bias=False,
        )
        self.bn = nn.BatchNorm2d(out_channels, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.act: nn.Module = nn.SiLU(inplace=True) if act else nn.Identity()
        self.nchw_when_channels_last = False
        """Compute the convolution in NCHW when the input is channels-last; the output keeps
        the input's layout (:func:`compute_depthwise_in_nchw`)."""

    @property
    def is_depthwise(self) -> bool:
        """One filter per channel (``groups == in == out > 1``)."""
        conv = self.conv
        return conv.groups > 1 and conv.groups == conv.in_channels == conv.out_channels

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in, H, W)`` → ``(B, out, H/stride, W/stride)``."""
        out: Tensor = self.act(self.bn(self._convolve(x)))
        return out

    def _convolve(self, x: Tensor) -> Tensor:
        channels_last = not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
        if not (self.nchw_when_channels_last and channels_last):
            out: Tensor = self.conv(x)
            return out
        conv = self.conv
        # A (C, 1, k, k) weight laid out channels-last keeps channels-last strides, which alone
        # would send the convolution back to cuDNN: the copy gives it NCHW strides.
        weight = conv.weight.clone(memory_format=torch.contiguous_format)
        nchw = F.conv2d(
            x.contiguous(), weight, None, conv.stride, conv.padding, conv.dilation, conv.groups
        )
        return nchw.contiguous(memory_format=torch.channels_last)


def depthwise(channels: int, kernel_size: int = 3) -> ConvBnAct:
    """A depthwise ``ConvBnAct`` (one filter per channel)."""
    return ConvBnAct(channels, channels, kernel_size, groups=channels)


def compute_depthwise_in_nchw(network: nn.Module, enabled: bool) -> int:
    """Have every depthwise unit of ``network`` compute in NCHW inside channels-last (or not).

    The result is the same computation with other kernels: not bitwise equal to the
    channels-last one, like any change of layout. Changes no parameter or buffer, so it can be
    set at any time before a forward is recorded for replay.

    Returns:
        The number of depthwise units set.
    """
    units = [m for m in network.modules() if isinstance(m, ConvBnAct) and m.is_depthwise]
    for unit in units:
        unit.nchw_when_channels_last = enabled
    return len(units)


__all__ = ["BN_EPS", "BN_MOMENTUM", "ConvBnAct", "compute_depthwise_in_nchw", "depthwise"]
