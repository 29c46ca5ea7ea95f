"""Convolutional building blocks of the YOLO26 backbone and neck.

All blocks are :class:`~lucid_yolo.models.conv.ConvBnAct` units arranged in cross-stage-partial
(CSP) patterns: the input is split, one part runs through a stack of bottlenecks, and every
intermediate output is concatenated before a 1×1 fusion, so gradients reach early layers along
short paths (CSPNet, Wang et al. 2020; the C2f/C3k2 variants of YOLOv8/YOLO11). Tensors are
``(B, C, H, W)``; every block keeps ``H, W`` unless a stride says otherwise.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lucid_yolo.models.attention import PSABlock
from lucid_yolo.models.conv import ConvBnAct


class Bottleneck(nn.Module):
    """Two 3×3 convs with a residual sum when the shapes allow it.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        expansion: hidden channels are ``int(out_channels * expansion)``.
        shortcut: add the input to the output (only when ``in == out``).
    """

    def __init__(
        self, in_channels: int, out_channels: int, *, expansion: float = 0.5, shortcut: bool = True
    ) -> None:
        super().__init__()
        hidden = int(out_channels * expansion)
        self.cv1 = ConvBnAct(in_channels, hidden, 3)
        self.cv2 = ConvBnAct(hidden, out_channels, 3)
        self.add = shortcut and in_channels == out_channels

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in, H, W)`` → ``(B, out, H, W)``."""
        y: Tensor = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3k(nn.Module):
    """CSP block with two parallel 1×1 branches, one of them through ``n`` bottlenecks.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        n: bottlenecks in the deep branch.
        shortcut: residual sums inside the bottlenecks.
    """

    def __init__(self, in_channels: int, out_channels: int, n: int = 2, *, shortcut: bool = True):
        super().__init__()
        hidden = out_channels // 2
        self.cv1 = ConvBnAct(in_channels, hidden)
        self.cv2 = ConvBnAct(in_channels, hidden)
        self.cv3 = ConvBnAct(2 * hidden, out_channels)
        self.m = nn.Sequential(
            *(Bottleneck(hidden, hidden, expansion=1.0, shortcut=shortcut) for _ in range(n))
        )

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in, H, W)`` → ``(B, out, H, W)``."""
        out: Tensor = self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), dim=1))
        return out


class C3k2(nn.Module):
    """The CSP workhorse: split, run ``n`` inner blocks in series, concatenate every stage.

    The inner block is a plain bottleneck, a nested :class:`C3k` (``deep``), or a bottleneck
    followed by a self-attention block (``attention``; used once, at P5 of the neck).

    Args:
        in_channels: input channels.
        out_channels: output channels.
        n: inner blocks.
        deep: use :class:`C3k` inner blocks.
        expansion: each half of the split has ``int(out_channels * expansion)`` channels.
        attention: use bottleneck + :class:`~lucid_yolo.models.attention.PSABlock` inner blocks.
        shortcut: residual sums inside the inner blocks.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        n: int = 1,
        *,
        deep: bool = False,
        expansion: float = 0.5,
        attention: bool = False,
        shortcut: bool = True,
    ) -> None:
        super().__init__()
        self.hidden = int(out_channels * expansion)
        c = self.hidden
        self.cv1 = ConvBnAct(in_channels, 2 * c)
        self.cv2 = ConvBnAct((2 + n) * c, out_channels)
        blocks: list[nn.Module] = []
        for _ in range(n):
            if attention:
                blocks.append(
                    nn.Sequential(
                        Bottleneck(c, c, shortcut=shortcut),
                        PSABlock(c, num_heads=max(c // 64, 1)),
                    )
                )
            elif deep:
                blocks.append(C3k(c, c, 2, shortcut=shortcut))
            else:
                blocks.append(Bottleneck(c, c, shortcut=shortcut))
        self.m = nn.ModuleList(blocks)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in, H, W)`` → ``(B, out, H, W)``."""
        y = self.cv1(x)
        parts = [y[:, : self.hidden], y[:, self.hidden :]]
        for block in self.m:
            parts.append(block(parts[-1]))
        out: Tensor = self.cv2(torch.cat(parts, dim=1))
        return out


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: ``n`` chained max-pools stand in for growing kernels.

    Chaining three 5×5 pools gives receptive fields 5, 9 and 13 at the cost of one; the YOLO26
    variant drops the activation after the input projection and adds a residual sum.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        kernel_size: max-pool kernel (stride 1, same padding).
        n: chained pools.
        shortcut: add the input to the output (only when ``in == out``).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 5,
        n: int = 3,
        *,
        shortcut: bool = True,
    ) -> None:
        super().__init__()
        hidden = in_channels // 2
        self.cv1 = ConvBnAct(in_channels, hidden, act=False)
        self.cv2 = ConvBnAct(hidden * (n + 1), out_channels)
        self.pool = nn.MaxPool2d(kernel_size, stride=1, padding=kernel_size // 2)
        self.n = n
        self.add = shortcut and in_channels == out_channels

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in, H, W)`` → ``(B, out, H, W)``."""
        parts = [self.cv1(x)]
        for _ in range(self.n):
            parts.append(self.pool(parts[-1]))
        y: Tensor = self.cv2(torch.cat(parts, dim=1))
        return x + y if self.add else y


__all__ = ["SPPF", "Bottleneck", "C3k", "C3k2"]
