"""Native vs replayed training step of a small conv/BN net: alternating pairs, medians.

Run on a CUDA machine: ``python tools/bench_replay.py --batch 4 --size 256 --steps 50``.
Prints per-step medians and ranges (ms) of native and replayed whole steps (forward, bf16
autocast, loss, backward, fused SGD update). A benchmark, never a test (DESIGN.md §7).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import Tensor, nn

from lucid_yolo.replay import RegionOutput, ReplayStep


def _net(width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, width, 3, stride=2, padding=1)]
    for _ in range(depth):
        layers += [nn.BatchNorm2d(width), nn.SiLU(), nn.Conv2d(width, width, 3, padding=1)]
    layers.append(nn.Conv2d(width, 4, 1))
    return nn.Sequential(*layers)


def _loss(out: RegionOutput, target: Tensor) -> Tensor:
    if not isinstance(out, Tensor):
        raise TypeError(f"the net's output is a {type(out).__name__}, not a Tensor")
    return nn.functional.mse_loss(out.float(), target)


def _time_steps(step: ReplayStep, x: Tensor, target: Tensor, steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step(x, target)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--depth", type=int, default=24)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = False
    results: dict[str, list[float]] = {"native": [], "replay": []}
    steps: dict[str, ReplayStep] = {}
    x = torch.randn(args.batch, 3, args.size, args.size, device="cuda")
    target = torch.randn(args.batch, 4, args.size // 2, args.size // 2, device="cuda")
    for mode in results:
        torch.manual_seed(0)
        net = _net(args.width, args.depth).cuda()
        lr = torch.tensor(0.01, device="cuda")
        opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, fused=True)
        replay = mode == "replay"
        steps[mode] = ReplayStep(
            net, _loss, opt, precision="bf16", graph_update=replay, enabled=replay
        )
        _time_steps(steps[mode], x, target, 5)
    # Alternating rounds: drift of clocks or co-tenants hits both modes alike.
    for _ in range(args.rounds):
        for mode, step in steps.items():
            results[mode] += _time_steps(step, x, target, args.steps)
    print("telemetry", steps["replay"].telemetry.as_dict())
    for mode, times in results.items():
        print(
            f"{mode}: median {statistics.median(times):.3f} ms [{min(times):.3f}, {max(times):.3f}]"
        )
    ratio = statistics.median(results["native"]) / statistics.median(results["replay"])
    print(f"speed-up native/replay: {ratio:.2f}x")


if __name__ == "__main__":
    main()
