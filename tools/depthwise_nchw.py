"""A channels-last YOLO26 network whose depthwise convolutions compute in NCHW (tools only).

Why (issue 11, whole-fit-speed.md, session 9): on the H200 with cuDNN 9.19, a channels-last
depthwise convolution goes to cuDNN, which compiles its execution plans at the first call: about
0.6-1.5 s for each of yolo26n's six depthwise configurations that take an input gradient, 5.5 s
of the first step at batch 16 (``tools/probe_first_conv.py``). An NCHW depthwise convolution in
bf16 runs PyTorch's own kernel, which needs no compilation. The price is two layout transposes
per layer, forward and backward. This wrapper lets the benchmarks time that variant
(``channels_last+dw-nchw``) before the models package decides anything.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

VARIANT = "channels_last+dw-nchw"
"""The variant's name in the layout benchmarks."""


class NchwDepthwise(nn.Module):
    """``conv`` on NCHW copies of its input and weight, its output back in channels-last."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: Tensor) -> Tensor:
        conv = self.conv
        weight = conv.weight.clone(memory_format=torch.contiguous_format)
        out = F.conv2d(
            x.contiguous(), weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups
        )
        return out.contiguous(memory_format=torch.channels_last)


def nchw_depthwise(model: nn.Module) -> int:
    """Wrap every depthwise ``Conv2d`` of ``model`` in :class:`NchwDepthwise`; how many."""
    wrapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if (
                isinstance(child, nn.Conv2d)
                and child.groups > 1
                and child.groups == child.in_channels == child.out_channels
            ):
                setattr(parent, name, NchwDepthwise(child))
                wrapped += 1
    return wrapped


__all__ = ["VARIANT", "NchwDepthwise", "nchw_depthwise"]
