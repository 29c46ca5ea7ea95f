"""GPU time of a YOLO26 forward+backward in NCHW against channels-last, both graphed.

A replayed step at batch 16 is bound by the GPU's own work (issue 11: 42 ms of a 45 ms step),
so the kernels themselves decide what is left to gain there. Channels-last changes which
convolution kernels run, not what the model computes; a native and a replayed fit that share
the layout stay bitwise equal (the parity matrix runs both layouts). This tool measures whether
the layout pays: each layout's forward and backward (bf16 autocast, a sum of the raw outputs as
the loss) is captured in a CUDA graph, so the host does not set the pace, and the two graphs are
replayed in alternating rounds; it prints the median and range of milliseconds per step.

Run (GPU machine, from source)::

    python3 tools/bench_memory_format.py --models yolo26n yolo26n-seg --batch 16 4 --out $OUT

A benchmark, never a test (DESIGN.md §7). It needs CUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from depthwise_nchw import VARIANT, nchw_depthwise
from lucid_yolo.models import create_model

DETERMINISTIC = "channels_last+cudnn-deterministic"
"""Channels-last with ``torch.backends.cudnn.deterministic`` on while the step is warmed and
captured: cuDNN then skips engines it marks non-deterministic. Session 25 found the first step's
compiled code in the depthwise convolutions' weight gradients; whether that engine is among the
skipped ones, and what the step pays for it, is what this variant times (with
``tools/probe_depthwise_warm.py --cudnn-deterministic`` for the first call)."""
CASTS_TOGETHER = "channels_last+casts-together"
"""Channels-last with the convolutions' weights cast to bfloat16 in one multi-tensor copy per
forward part and their gradients cast back one block at a time
(``YOLO26.casts_weights_together``), against autocast's cast per tensor where it is used, the
network's default (session 47; session 46 timed a tool-side wrapper of the same casts)."""
LAYOUTS = {
    "contiguous": torch.contiguous_format,
    "channels_last": torch.channels_last,
    VARIANT: torch.channels_last,
    DETERMINISTIC: torch.channels_last,
    CASTS_TOGETHER: torch.channels_last,
}


def _graphed_step(name: str, batch: int, imgsz: int, layout: str) -> Callable[[], None]:
    """A callable that replays one captured forward+backward of ``name`` in ``layout``; the
    cuDNN flags of the variant hold while it is warmed and captured, and are put back."""
    before = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = layout == DETERMINISTIC
    try:
        return _captured_step(name, batch, imgsz, layout)
    finally:
        torch.backends.cudnn.deterministic = before


def _model(name: str, layout: str) -> nn.Module:
    """``name`` in training mode, set up as ``layout``'s variant asks (still on the CPU)."""
    model = create_model(name).train()
    if layout == VARIANT:
        nchw_depthwise(model)
    model.casts_weights_together = layout == CASTS_TOGETHER
    return model


def _captured_step(name: str, batch: int, imgsz: int, layout: str) -> Callable[[], None]:
    model = _model(name, layout).cuda().to(memory_format=LAYOUTS[layout])
    images = torch.rand(batch, 3, imgsz, imgsz, device="cuda").to(memory_format=LAYOUTS[layout])

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            outputs = model(images)
        loss = torch.stack([o.float().sum() for o in outputs.values() if o.requires_grad]).sum()
        torch.autograd.backward(loss)

    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model.zero_grad(set_to_none=False)
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    def replay() -> None:
        # the graph reads the model's weights and the images: they must outlive it
        _ = model, images
        graph.replay()

    return replay


def _round_ms(replay: Callable[[], None], steps: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["yolo26n", "yolo26n-seg"])
    parser.add_argument("--batch", type=int, nargs="+", default=[16, 4])
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--steps", type=int, default=20, help="replays per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--layouts", nargs="+", choices=list(LAYOUTS), default=list(LAYOUTS))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models:
        for batch in args.batch:
            layouts = args.layouts
            steps = {layout: _graphed_step(name, batch, args.imgsz, layout) for layout in layouts}
            times: dict[str, list[float]] = {layout: [] for layout in layouts}
            for r in range(args.rounds):
                order = list(layouts) if r % 2 == 0 else list(reversed(layouts))
                for layout in order:
                    times[layout].append(_round_ms(steps[layout], args.steps))
            row = {"model": name, "batch": batch, "imgsz": args.imgsz}
            for layout, values in times.items():
                row[layout] = {
                    "median_ms": statistics.median(values),
                    "min_ms": min(values),
                    "max_ms": max(values),
                }
            rows.append(row)
            print(json.dumps(row), flush=True)
            del steps
            torch.cuda.empty_cache()
    (args.out / "memory_format.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
