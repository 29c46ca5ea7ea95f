"""One rank of a DistributedDataParallel training loop, native or replayed (gloo, CPU).

Spawned ranks import this module by name (see ``tests/helpers/gloo_ranks.py``). The region
recorder sits inside the module DDP wraps, so DDP's forward prepares the reducer as usual and
its hooks on each parameter's ``AccumulateGrad`` see the replayed gradients.
"""

from __future__ import annotations

import torch
from replay_nets import SmallNet, loss_of, make_net
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from lucid_yolo.replay import ModuleRegion, RegionRecorder, grads_of, state_digest


class _Recorded(nn.Module):
    """``net`` behind a region recorder (the recorder is not a submodule: DDP sees ``net``)."""

    def __init__(self, net: SmallNet, warmup_steps: int) -> None:
        super().__init__()
        self.net = net
        self.recorder = RegionRecorder(ModuleRegion(net), warmup_steps=warmup_steps)

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        out: dict[str, Tensor] = self.recorder(x)
        return out


def ddp_train(
    rank: int, world_size: int, replay: bool, accumulation: int, steps: int, warmup: int = 1
) -> tuple[dict[str, str], int]:
    """SGD steps of a DDP-wrapped :class:`SmallNet`, ``accumulation`` micro-batches each (all
    but the last under ``no_sync``), each rank on its own data; the recorder runs ``warmup``
    calls natively before it records. Returns the digest of weights, buffers, the reduced
    gradients, optimizer state and losses, and the replays made."""
    net = make_net()
    module: nn.Module = _Recorded(net, warmup) if replay else net
    # a bucket per parameter or two: the rebuilt bucket order and bucket edges matter
    ddp = DistributedDataParallel(module, bucket_cap_mb=0.0005)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    grads: dict[str, Tensor | None] = {}
    for step in range(steps):
        for micro in range(accumulation):
            x = torch.randn(2, 3, 8, 8, generator=gen)
            target = torch.randn(2, 4, 8, 8, generator=gen)
            torch.manual_seed(1000 + 10 * step + micro)
            if micro < accumulation - 1:
                with ddp.no_sync():
                    loss = loss_of(ddp(x), target)
                    loss.backward()
            else:
                loss = loss_of(ddp(x), target)
                loss.backward()
            losses.append(loss.detach())
        grads = {k: None if g is None else g.clone() for k, g in grads_of(net).items()}
        optimizer.step()
        optimizer.zero_grad()
    replays = module.recorder.telemetry.replays if isinstance(module, _Recorded) else 0
    digest = state_digest({"net": net, "grads": grads, "optim": optimizer, "losses": losses})
    return digest, replays


def ddp_train_runs(
    rank: int, world_size: int, runs: list[tuple[bool, int, int, int]]
) -> list[tuple[dict[str, str], int]]:
    """:func:`ddp_train` for each ``(replay, accumulation, steps, warmup)`` of ``runs`` in turn,
    in one process: a spawned rank spends most of its time importing torch, so one spawn serves
    every run."""
    return [ddp_train(rank, world_size, *run) for run in runs]
