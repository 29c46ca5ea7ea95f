"""Host work of a replayed step's bookkeeping, without the kernels: what the H200 profile blamed.

At batch 4 a replayed YOLO26 step is host-bound (docs/engineering/whole-fit-speed.md, "Host work
per replayed step"): the GPU finishes before the host has issued the next step. This tool times
the per-step checks and copies that the replay library adds around the graph launches of one
step of a YOLO26 model, without running the network:

* ``region_check``: :meth:`Binding.check` of the network region (identity, storage, forwards,
  children and hooks of every submodule and parameter), once per replayed region call;
* ``region_signature``: building the call's :class:`Signature` and looking it up, as the
  recorder does before each replay;
* ``update_key``: the optimizer update's key (every parameter's address, every gradient's
  layout, every group's hyperparameters, the optimizer state's identity) and its lookup, once
  per replayed update;
* ``route_first_micro_batch``: handing gradients to every parameter after
  ``zero_grad(set_to_none=True)`` (:func:`lucid_yolo.replay._autograd.route`: one private
  tensor each, holding the static gradient's bits; on the CPU the copies move the bytes, on CUDA
  they are only queued); ``route_dispatches`` counts the operators it calls into torch (one
  ``_foreach_clone`` since session 30 where torch has it, else an ``empty_like`` each and a
  grouped copy; session 29's an ``empty_strided`` each and a grouped copy), and on CUDA
  ``route_kernels`` the kernels they launch (torch's profiler);
  ``route_reusing`` is the same hand-off with every parameter given a spare to overwrite (the
  gradients kept from the backward before, :mod:`lucid_yolo.replay._recycling`), and
  ``spare_check`` the reference counts read to tell that nothing else holds the spares;
* ``grouped_copy``: :func:`lucid_yolo.replay.copy_grouped` over as many one-element float32
  tensors as the model has parameters, the host's part of the copies a replayed step makes of
  every parameter or gradient (the private gradients', the update's copy-in and copy-out, its
  backup), the bytes left out.

``--ops`` adds, per model, the operators that launch work in each graph of a replayed step, as
dispatched on the CPU (views left out; a CUDA graph holds about one kernel node per operator,
more for some, e.g. a convolution with its bias): the network's forward and backward
(``torch.autograd.grad`` of every output), and the update with its clip, backup and EMA blend
(:class:`~lucid_yolo.train.replay.UpdateStep` as the fit builds it when fp32/bf16 replay the
update). A graph's launch cost on the host grows with its node count.

Each number is the fastest over ``--rounds`` of the mean over ``--repeat`` calls (the least
disturbed by other processes), in microseconds of host time; on CUDA the device is synchronised
between rounds, never inside one.

Run (from the repository root; ``--device cuda`` on the GPU machine)::

    uv run python tools/bench_step_host.py --models yolo26n yolo26n-seg --out /tmp/step_host.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch._C._autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from dispatch_count import VIEW_OPS, DispatchCount
from lucid_yolo.models import create_model
from lucid_yolo.replay import RegionRecorder, copy_grouped
from lucid_yolo.replay._autograd import route
from lucid_yolo.replay._recycling import _owner_counts
from lucid_yolo.train.optim import MuSGD, param_groups, trainer_ema
from lucid_yolo.train.replay import UpdateStep
from lucid_yolo.train.replay.regions import NetworkRegion


def _time_us(call: Callable[[], object], repeat: int, rounds: int, device: str) -> float:
    samples = []
    for _ in range(rounds):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeat):
            call()
        samples.append((time.perf_counter() - start) * 1e6 / repeat)
    return round(min(samples), 1)


def _cuda_kernels(call: Callable[[], object]) -> int:
    """Kernels (and device copies) that ``call`` launches on the GPU."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiled:
        call()
        torch.cuda.synchronize()
    return sum(1 for event in profiled.events() if event.device_type == DeviceType.CUDA)


def measure(name: str, device: str, repeat: int, rounds: int) -> dict[str, Any]:
    """Per-call host microseconds of each piece of bookkeeping for model ``name``."""
    torch.manual_seed(0)
    net = create_model(name, num_classes=80).to(device)
    recorder = RegionRecorder(NetworkRegion(net), name="network")
    binding = recorder.binding
    images = torch.zeros(4, 3, 64, 64, device=device)
    known = {binding.signature((images,), device): None}

    optimizer = MuSGD(param_groups(net, weight_decay=5e-4), lr=0.01, weight_decay=5e-4)
    step = UpdateStep(optimizer, trainer_ema(net), replay=True)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for p in params:
        p.grad = torch.zeros_like(p)
    update = step.graphed.recorder
    update_keys = {update.key(): None}

    fresh = [torch.nn.Parameter(torch.empty_like(p)) for p in params]
    statics = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def route_after_zero_grad() -> None:
        route(fresh, statics, False)

    spares = [torch.empty_like(p) for p in params]

    @torch.no_grad()
    def route_reusing() -> None:
        route(fresh, statics, False, spares)

    with DispatchCount(ignore=VIEW_OPS) as count:
        route_after_zero_grad()

    copy_targets = [torch.zeros(1, device=device) for _ in params]
    copy_sources = [torch.ones(1, device=device) for _ in params]

    def timed(call: Callable[[], object]) -> float:
        return _time_us(call, repeat, rounds, device)

    return {
        "parameters": len(binding.parameters),
        "buffers": len(binding.buffers),
        "submodules": len(binding.submodules),
        "region_check_us": timed(binding.check),
        "region_signature_us": timed(lambda: known.get(binding.signature((images,), device))),
        "update_key_us": timed(lambda: update_keys.get(update.key())),
        "route_first_micro_batch_us": timed(route_after_zero_grad),
        "route_dispatches": sum(count.ops.values()),
        "route_kernels": _cuda_kernels(route_after_zero_grad) if device == "cuda" else None,
        "route_reusing_us": timed(route_reusing),
        "spare_check_us": timed(lambda: _owner_counts(spares, range(len(spares)))),
        "grouped_copy_us": timed(lambda: copy_grouped(copy_targets, copy_sources)),
    }


def graph_ops(name: str) -> dict[str, int]:
    """Operators launching work in the network's forward and backward and in the update (CPU)."""
    torch.manual_seed(0)
    net = create_model(name, num_classes=80)
    region = NetworkRegion(net)
    images = torch.rand(4, 3, 64, 64)
    with DispatchCount(ignore=VIEW_OPS) as forward:
        outputs = [o for o in region(images).values() if o.requires_grad]
    params = [p for p in net.parameters() if p.requires_grad]
    grads = [torch.ones_like(o) for o in outputs]
    with DispatchCount(ignore=VIEW_OPS) as backward:
        torch.autograd.grad(outputs, params, grads, allow_unused=True)
    optimizer = MuSGD(param_groups(net, weight_decay=5e-4), lr=0.01, weight_decay=5e-4)
    step = UpdateStep(optimizer, trainer_ema(net), replay=False, backup=True, clip_norm=10.0)
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    step._native()  # the first update allocates the backup's copies
    with DispatchCount(ignore=VIEW_OPS) as update:
        step._native()
    return {
        "network_forward": sum(forward.ops.values()),
        "network_backward": sum(backward.ops.values()),
        "update": sum(update.ops.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["yolo26n", "yolo26n-seg"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", action="store_true", help="count each graph's operators")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report = {name: measure(name, args.device, args.repeat, args.rounds) for name in args.models}
    if args.ops:
        for name in args.models:
            report[name]["graph_ops"] = graph_ops(name)
    report["device"] = {"name": args.device}
    text = json.dumps(report, indent=1)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
