"""The conv → BatchNorm → SiLU unit that every YOLO26 layer is built from.

BatchNorm uses ``eps = 1e-3`` and ``momentum = 0.03`` (the YOLO family's values: a slow running
average suits the small, heavily augmented batches of detector training).
"""

from __future__ import annotations

from torch import Tensor, nn

from lucid_yolo.models.weight_casts import CastConv2d

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
        self.conv = CastConv2d(
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

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in, H, W)`` → ``(B, out, H/stride, W/stride)``."""
        out: Tensor = self.act(self.bn(self.conv(x)))
        return out


def depthwise(channels: int, kernel_size: int = 3) -> ConvBnAct:
    """A depthwise ``ConvBnAct`` (one filter per channel)."""
    return ConvBnAct(channels, channels, kernel_size, groups=channels)


__all__ = ["BN_EPS", "BN_MOMENTUM", "ConvBnAct", "depthwise"]
