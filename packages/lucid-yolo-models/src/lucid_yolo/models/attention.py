"""Position-sensitive self-attention blocks (the PSA/C2PSA design of YOLOv10/YOLO11).

Convolutional detectors see far only through depth; one multi-head self-attention over the
P5 grid (20×20 tokens at 640 px) gives every cell a global view for little compute. Queries,
keys and values come from one 1×1 conv; a depthwise 3×3 conv on the values adds a positional
term, so no explicit position embedding is needed. Keys are half as wide as values
(``attn_ratio = 0.5``) to halve the cost of the score matrix.

The ``1/sqrt(key_dim)`` scale multiplies the queries before the product ``Q^T K``, not the
product after it: both are the same function, but they round differently, and scaling first is
the order of the reference implementation, so imported Ultralytics weights give bitwise-equal
outputs (:mod:`lucid_yolo.models.weights`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lucid_yolo.models.conv import ConvBnAct


class Attention(nn.Module):
    """Multi-head self-attention over all ``H × W`` positions.

    Args:
        channels: input = output channels; must be divisible by ``num_heads``.
        num_heads: attention heads.
        attn_ratio: key (and query) width per head as a fraction of the value width.
    """

    def __init__(self, channels: int, num_heads: int = 8, attn_ratio: float = 0.5) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = channels // num_heads
        self.key_dim = int(self.head_dim * attn_ratio)
        self.scale = self.key_dim**-0.5
        qkv_channels = channels + 2 * self.key_dim * num_heads
        self.qkv = ConvBnAct(channels, qkv_channels, act=False)
        self.proj = ConvBnAct(channels, channels, act=False)
        self.pe = ConvBnAct(channels, channels, 3, groups=channels, act=False)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, H, W)`` → ``(B, C, H, W)``."""
        B, C, H, W = x.shape
        N = H * W
        # (B, heads, 2*key_dim + head_dim, N): per head its queries, keys and values
        qkv = self.qkv(x).reshape(B, self.num_heads, 2 * self.key_dim + self.head_dim, N)
        q = qkv[:, :, : self.key_dim]
        k = qkv[:, :, self.key_dim : 2 * self.key_dim]
        v = qkv[:, :, 2 * self.key_dim :]
        scores = torch.matmul((q * self.scale).transpose(-2, -1), k)  # (B, heads, N, N)
        weights = scores.softmax(dim=-1)
        out = torch.matmul(v, weights.transpose(-2, -1)).reshape(B, C, H, W)
        out = out + self.pe(v.reshape(B, C, H, W))
        result: Tensor = self.proj(out)
        return result


class PSABlock(nn.Module):
    """Attention then a 1×1 feed-forward pair, each with a residual sum (a transformer layer
    with convolutions and BatchNorm in place of linear layers and LayerNorm).

    Args:
        channels: input = output channels.
        num_heads: attention heads.
        attn_ratio: see :class:`Attention`.
    """

    def __init__(self, channels: int, num_heads: int = 4, attn_ratio: float = 0.5) -> None:
        super().__init__()
        self.attn = Attention(channels, num_heads=num_heads, attn_ratio=attn_ratio)
        self.ffn = nn.Sequential(
            ConvBnAct(channels, 2 * channels), ConvBnAct(2 * channels, channels, act=False)
        )

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, H, W)`` → ``(B, C, H, W)``."""
        x = x + self.attn(x)
        out: Tensor = x + self.ffn(x)
        return out


class C2PSA(nn.Module):
    """CSP wrapper: half of the channels pass through ``n`` :class:`PSABlock` s.

    Args:
        channels: input = output channels.
        n: attention blocks in series.
    """

    def __init__(self, channels: int, n: int = 1) -> None:
        super().__init__()
        self.hidden = channels // 2
        self.cv1 = ConvBnAct(channels, 2 * self.hidden)
        self.cv2 = ConvBnAct(2 * self.hidden, channels)
        self.m = nn.Sequential(
            *(PSABlock(self.hidden, num_heads=max(self.hidden // 64, 1)) for _ in range(n))
        )

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, H, W)`` → ``(B, C, H, W)``."""
        y = self.cv1(x)
        kept, attended = y[:, : self.hidden], y[:, self.hidden :]
        out: Tensor = self.cv2(torch.cat((kept, self.m(attended)), dim=1))
        return out


__all__ = ["C2PSA", "Attention", "PSABlock"]
