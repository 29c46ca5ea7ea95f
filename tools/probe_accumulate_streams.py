"""Where the host's time goes in a replayed network backward: CUDA calls, autograd's nodes.

In a replayed detect batch-4 fit, ``torch.autograd.backward`` takes about 9 ms of host time a
step of which the regions' own backward code is about 2.5 ms (``tools/host_split_callback.py``,
session 30-31), and the split cannot see inside autograd's C++ engine. One suspect is streams:
autograd runs every node on the stream that was current when the node was made and, for a
gradient crossing from a node on one stream to a node on another, records an event and makes
the consumer's stream wait on it; a recording warms up and captures on the pool's side stream,
so a parameter's ``AccumulateGrad`` node made there would cost an event per parameter (366 for
yolo26n) in every replayed backward. The recorder records against leaf aliases of the
parameters for that reason (their nodes stay the caller's stream's), which this probe checks.

It replays yolo26n's network region (``NetworkRegion``, bf16 autocast, channels-last, as the fit
runs it) under a squared-mean loss, and reports per variant (``native``: the recorder disabled,
the reference bits; ``replay``: gradients handed to autograd's nodes; ``replay-direct``: the
recorder writes ``.grad`` itself, ``direct_gradients``, session 31):

* ``host_backward_ms``: the host's wall time of ``backward()`` per step, median and range of the
  timed steps (the device is synchronised before each, so the host never waits on a full queue);
* ``cuda_api_per_backward``: the CUDA runtime and driver calls of one backward by name
  (``torch.profiler``): events and stream waits, kernel and graph launches, copies;
* ``host_ops``: the CPU-side operations of that backward with the most own time, in
  milliseconds (under the profiler, so slower than unobserved);
* ``grad_digest``: one digest of every gradient after the last step, equal between the variants
  when the bits are;
* ``replays`` and ``native_calls``: the recorder's telemetry, so a variant that did not replay
  shows it.

Run (GPU machine, from source)::

    python3 tools/probe_accumulate_streams.py --steps 40 --out $OUT/streams.json

With ``--device cpu`` it runs on the CPU stand-in (a smoke test: no CUDA calls to count)::

    python3 tools/probe_accumulate_streams.py --device cpu --imgsz 64 --steps 4 --rounds 1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from lucid_yolo.models import create_model
from lucid_yolo.replay import RegionRecorder
from lucid_yolo.replay.digest import state_digest
from lucid_yolo.train.replay.regions import NetworkRegion

_RUNTIME_PREFIXES = ("cuda", "cu")
_HOST_OPS = 25
VARIANTS = ("native", "replay", "replay-direct")


def _fold(digest: dict[str, str]) -> str:
    """One short digest of every gradient's digest."""
    return hashlib.sha256(json.dumps(digest, sort_keys=True).encode()).hexdigest()[:16]


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_variant(
    variant: str, steps: int, batch: int, imgsz: int, device: torch.device
) -> dict[str, Any]:
    """``steps`` training steps of yolo26n's network; the last one profiled."""
    torch.manual_seed(0)
    net = create_model("yolo26n", num_classes=80).to(device)
    net = net.to(memory_format=torch.channels_last)
    recorder = RegionRecorder(
        NetworkRegion(net),
        name="network",
        enabled=variant != "native",
        direct_gradients=variant == "replay-direct",
    )
    generator = torch.Generator(device=device).manual_seed(1)
    images = torch.rand(batch, 3, imgsz, imgsz, device=device, generator=generator)
    images = images.contiguous(memory_format=torch.channels_last)
    host_ms: list[float] = []
    api: Counter[str] = Counter()
    ops: list[tuple[str, float, int]] = []
    for step in range(steps):
        for p in net.parameters():
            p.grad = None
        with torch.autocast(device.type, dtype=torch.bfloat16):
            outputs = recorder(images)
        if not isinstance(outputs, Mapping):
            raise TypeError(f"the network region returned {type(outputs).__name__}, not a mapping")
        loss = sum(o.float().square().mean() for o in outputs.values())
        if not isinstance(loss, torch.Tensor):
            raise TypeError("the network region returned no outputs")
        _synchronize(device)
        if step < steps - 1:
            start = time.perf_counter()
            loss.backward()  # type: ignore[no-untyped-call]
            elapsed = (time.perf_counter() - start) * 1e3
            if step >= steps // 4:
                host_ms.append(elapsed)
            continue
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities) as trace:
            loss.backward()  # type: ignore[no-untyped-call]
            _synchronize(device)
        api.update(e.name for e in trace.events() if e.name.startswith(_RUNTIME_PREFIXES))
        averages = sorted(trace.key_averages(), key=lambda a: -a.self_cpu_time_total)
        ops = [
            (a.key, round(a.self_cpu_time_total / 1e3, 3), a.count) for a in averages[:_HOST_OPS]
        ]
    _synchronize(device)
    telemetry = recorder.telemetry
    return {
        "variant": variant,
        "host_backward_ms": round(statistics.median(host_ms), 3),
        "host_backward_ms_range": [round(min(host_ms), 3), round(max(host_ms), 3)],
        "cuda_api_per_backward": dict(api.most_common()),
        "host_ops": ops,
        "grad_digest": _fold(state_digest({n: p.grad for n, p in net.named_parameters()})),
        "replays": telemetry.replays,
        "native_calls": dict(telemetry.native_calls),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = []
    for round_ in range(args.rounds):
        for variant in args.variants:
            measured = run_variant(
                variant, args.steps, args.batch, args.imgsz, torch.device(args.device)
            )
            result = {"round": round_, **measured}
            results.append(result)
            print(json.dumps(result), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
