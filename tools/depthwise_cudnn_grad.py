"""A channels-last YOLO26 network whose depthwise input gradients go to cuDNN again (tools only).

Why (issue 11, whole-fit-speed.md, session 25): the models package computes a stride-1 depthwise
convolution's input gradient as a forward convolution through the rotated filters
(:class:`~lucid_yolo.models.depthwise_conv.DepthwiseConv2d`), because cuDNN compiles its own
channels-last engine for it at run time, seconds a process. This variant puts cuDNN's engine
back, so the benchmarks can time both in one call: the first step's cost, and the steady step's.
"""

from __future__ import annotations

import types

from torch import nn

from lucid_yolo.models.depthwise_conv import DepthwiseConv2d

VARIANT = "channels_last+dw-cudnn-grad"
"""The variant's name in the layout benchmarks."""


def cudnn_input_grad(model: nn.Module) -> int:
    """Give every :class:`DepthwiseConv2d` of ``model`` the plain ``nn.Conv2d`` forward; how many."""
    changed = 0
    for module in model.modules():
        if isinstance(module, DepthwiseConv2d):
            module.forward = types.MethodType(nn.Conv2d.forward, module)  # type: ignore[method-assign]
            changed += 1
    return changed


__all__ = ["VARIANT", "cudnn_input_grad"]
