"""Nets and losses shared by the replay tests (imported by name: tests are not a package)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class SmallNet(nn.Module):
    """Conv → BN → SiLU → Dropout → two heads; returns a dict like the YOLO raw outputs."""

    def __init__(self, channels: int = 8, shared_twice: bool = False) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.drop = nn.Dropout(0.1)
        self.mid = nn.Conv2d(channels, channels, 3, padding=1)
        self.head_a = nn.Conv2d(channels, 4, 1)
        self.head_b = nn.Conv2d(channels, 2, 1)
        self.shared_twice = shared_twice

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        y = self.drop(nn.functional.silu(self.bn(self.stem(x))))
        y = self.mid(y)
        if self.shared_twice:
            y = self.mid(nn.functional.silu(y))
        return {"a.box": self.head_a(y), "b.box": self.head_b(y)}


def make_net(device: str = "cpu", seed: int = 0, **kwargs: bool) -> SmallNet:
    """A freshly initialised :class:`SmallNet` with a fixed seed."""
    torch.manual_seed(seed)
    return SmallNet(**kwargs).to(device)


def loss_of(outputs: dict[str, Tensor], target: Tensor) -> Tensor:
    """Native loss after the region: reads both prediction groups."""
    a, b = outputs["a.box"], outputs["b.box"]
    return ((a - target[:, :4]) ** 2).mean() + nn.functional.softplus(b).mean()
