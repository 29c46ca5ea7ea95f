"""Nets and losses shared by the replay tests (imported by name: tests are not a package)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from lucid_yolo.replay import ModuleRegion, RegionRecorder, ReplayPool, grads_of, state_digest

Forward = Callable[[Tensor], dict[str, Tensor]]


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


def make_net(device: str = "cpu", seed: int = 0, **kwargs: int | bool) -> SmallNet:
    """A freshly initialised :class:`SmallNet` with a fixed seed."""
    torch.manual_seed(seed)
    return SmallNet(**kwargs).to(device)


def loss_of(outputs: dict[str, Tensor], target: Tensor) -> Tensor:
    """Native loss after the region: reads both prediction groups."""
    a, b = outputs["a.box"], outputs["b.box"]
    return ((a - target[:, :4]) ** 2).mean() + nn.functional.softplus(b).mean()


def train_digest(
    net: nn.Module, forward: Forward, steps: int, accumulation: int, set_to_none: bool = True
) -> dict[str, str]:
    """SGD steps with ``accumulation`` micro-batches; digest of weights, buffers, grads, losses."""
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    losses = []
    gen = torch.Generator().manual_seed(1)
    for step in range(steps):
        for micro in range(accumulation):
            x = torch.randn(2, 3, 8, 8, generator=gen)
            target = torch.randn(2, 4, 8, 8, generator=gen)
            torch.manual_seed(1000 + 10 * step + micro)
            loss = loss_of(forward(x), target)
            loss.backward()
            losses.append(loss.detach())
        grads = {k: None if g is None else g.clone() for k, g in grads_of(net).items()}
        optimizer.step()
        optimizer.zero_grad(set_to_none=set_to_none)
    return state_digest({"net": net, "grads": grads, "optim": optimizer, "losses": losses})


def recorded_small_net(
    device: str, pool: ReplayPool | None = None
) -> tuple[RegionRecorder, ReplayPool]:
    """A 32-channel :class:`SmallNet` region after three steps on ``device`` (a native warm-up,
    the recording, one replay) at batch 8, 128 px, and the pool it recorded into (``pool``, or a
    new one)."""
    net = make_net(device, channels=32)
    pool = ReplayPool(device) if pool is None else pool
    recorder = RegionRecorder(ModuleRegion(net), pool=pool)
    x = torch.randn(8, 3, 128, 128, device=device)
    target = torch.randn(8, 4, 128, 128, device=device)
    for _ in range(3):
        loss_of(recorder(x), target).backward()
    return recorder, pool


def side_stream_segments(pool: ReplayPool) -> list[dict[str, Any]]:
    """The caching allocator's segments on ``pool``'s side stream outside every graph pool."""
    side = pool.stream.cuda_stream
    return [
        s
        for s in torch.cuda.memory_snapshot()
        if s["stream"] == side and tuple(s["segment_pool_id"]) == (0, 0)
    ]


def live_side_stream_blocks(pool: ReplayPool) -> set[tuple[int, int]]:
    """``(address, size)`` of the allocated blocks on ``pool``'s side stream outside every pool."""
    live = set()
    for segment in side_stream_segments(pool):
        address = int(segment["address"])
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                live.add((address, int(block["size"])))
            address += int(block["size"])
    return live


def log_pool_routing(monkeypatch: pytest.MonkeyPatch, events: list[str]) -> None:
    """Append ``route`` and ``unroute`` to ``events`` around each routing of the side stream's
    allocations into a pool (the routing itself is left out: the CPU has no pool to route to)."""

    @contextlib.contextmanager
    def routed(self: ReplayPool) -> Iterator[None]:
        events.append("route")
        yield
        events.append("unroute")

    monkeypatch.setattr(ReplayPool, "side_stream_allocates_in_pool", routed)
