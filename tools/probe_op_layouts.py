"""GPU time of a YOLO26 network's BatchNorm and max-pool layers, channels-last against NCHW.

A replayed batch-4 detect step runs about 3,300 kernels on the H200 in 14.5 ms, and the
BatchNorm layers' training kernels are the largest family among them (about 4.1 ms, session
20): the channels-last statistics kernel took about 15.5 µs a layer at batch 4 and at batch 16,
and the channels-last max-pool kernels of the SPPF block 46 µs (forward) and 74 µs (backward) at
20 × 20 pixels. Whether the contiguous (NCHW) kernels do these layers faster is what decides if
a layout per layer (or per stage) can pay; this tool measures it for every distinct BatchNorm
and max-pool input the network sees, without the rest of the network.

For each distinct (layer kind, input shape) of ``--model`` at ``--batch`` (found by forward
pre-hooks in one bf16 forward of the channels-last network), it captures ``--reps`` forward +
backward passes of that layer alone in a CUDA graph (bf16 input, the layer's own float32
parameters, training mode: batch statistics and the running averages' update) in each layout
and replays the graphs in alternating rounds, so host launches do not set the pace. The
backward computes what training's does: the input's gradient and BatchNorm's weight and bias
gradients. The passes reuse the same small tensors, which may stay in the L2 cache, so the
times may be below the layer's cost inside the network, for either layout. It prints
and writes (``--out``) per shape: how many layers of the network see it, microseconds per
forward + backward in each layout (median of ``--rounds``), and whether the two layouts' outputs,
gradients and running statistics are bitwise equal; then the network's totals (each shape's
time × its count).

Run (GPU machine, from source)::

    python3 tools/probe_op_layouts.py --model yolo26n --batch 4 16 --out $OUT/op_layouts.json

A probe, never a test. It needs CUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from lucid_yolo.models import create_model

LAYOUTS = {"channels_last": torch.channels_last, "contiguous": torch.contiguous_format}

LayerKey = tuple[str, tuple[int, ...], tuple[Any, ...]]
"""(kind, input shape, the layer's settings) of one distinct layer input."""


def layer_inputs(
    model: nn.Module, batch: int, imgsz: int, device: torch.device
) -> Counter[LayerKey]:
    """How many BatchNorm and max-pool calls of ``model`` see each input shape, from one bf16
    forward of the channels-last network on ``device`` (a module called twice counts twice)."""
    seen: Counter[LayerKey] = Counter()

    def record(module: nn.Module, inputs: tuple[Tensor, ...]) -> None:
        shape = tuple(inputs[0].shape)
        if isinstance(module, nn.BatchNorm2d):
            seen[("batch_norm", shape, (module.eps, module.momentum))] += 1
        else:
            assert isinstance(module, nn.MaxPool2d)
            seen[("max_pool", shape, (module.kernel_size, module.stride, module.padding))] += 1

    handles = [
        module.register_forward_pre_hook(record)
        for module in model.modules()
        if isinstance(module, nn.BatchNorm2d | nn.MaxPool2d)
    ]
    images = torch.rand(batch, 3, imgsz, imgsz, device=device)
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
        model(images.contiguous(memory_format=torch.channels_last))
    for handle in handles:
        handle.remove()
    return seen


def _layer(key: LayerKey) -> nn.Module:
    kind, shape, settings = key
    if kind == "batch_norm":
        eps, momentum = settings
        return nn.BatchNorm2d(shape[1], eps=eps, momentum=momentum).cuda().train()
    kernel, stride, padding = settings
    return nn.MaxPool2d(kernel, stride=stride, padding=padding)


def _graph(
    key: LayerKey, layout: torch.memory_format, reps: int
) -> tuple[Callable[[], None], list[Tensor]]:
    """A replay of ``reps`` forward + backward passes of one layer in ``layout``, and the
    tensors to compare across layouts: the last pass's output, the gradients of the input and of
    BatchNorm's weight and bias, and BatchNorm's running statistics."""
    torch.manual_seed(0)
    layer = _layer(key)
    source = torch.randn(key[1], device="cuda").to(torch.bfloat16)
    x = source.contiguous(memory_format=layout).requires_grad_()
    grad_out = (
        torch.randn(key[1], device="cuda").to(torch.bfloat16).contiguous(memory_format=layout)
    )
    results: list[Tensor] = []

    inputs = (x, *layer.parameters())  # BatchNorm's weight and bias get gradients, as in training

    def passes() -> None:
        for _ in range(reps):
            y = layer(x)
            grads = torch.autograd.grad(y, inputs, grad_out)
        results[:] = [y, *grads, *layer.buffers()]

    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        passes()  # warm-up: cuDNN/kernels chosen, workspaces allocated outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        passes()
    return graph.replay, results


def measure(key: LayerKey, reps: int, rounds: int) -> dict[str, Any]:
    """Microseconds per forward + backward of one layer in each layout, and whether what
    :func:`_graph` hands for comparison has the same bits in both."""
    graphs = {name: _graph(key, layout, reps) for name, layout in LAYOUTS.items()}
    times: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    for round_ in range(rounds):
        order = list(LAYOUTS) if round_ % 2 == 0 else list(reversed(LAYOUTS))
        for name in order:
            replay = graphs[name][0]
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            replay()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1000.0 / reps)
    (_, last), (_, other) = graphs["channels_last"], graphs["contiguous"]
    return {
        **{f"{name}_us": round(statistics.median(values), 2) for name, values in times.items()},
        "bitwise_equal": all(torch.equal(a, b) for a, b in zip(last, other, strict=True)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="yolo26n")
    parser.add_argument("--batch", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--reps", type=int, default=20, help="passes captured in one graph")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("probe_op_layouts needs CUDA")
    model = create_model(args.model, num_classes=80).cuda().to(memory_format=torch.channels_last)
    report: dict[str, Any] = {"model": args.model, "imgsz": args.imgsz, "batches": []}
    for batch in args.batch:
        rows = []
        for key, count in sorted(
            layer_inputs(model, batch, args.imgsz, torch.device("cuda")).items()
        ):
            rows.append({"kind": key[0], "shape": list(key[1]), "layers": count,
                         **measure(key, args.reps, args.rounds)})  # fmt: skip
        totals = {
            kind: {
                f"{name}_ms": round(
                    sum(r[f"{name}_us"] * r["layers"] for r in rows if r["kind"] == kind) / 1000, 3
                )
                for name in LAYOUTS
            }
            for kind in ("batch_norm", "max_pool")
        }
        report["batches"].append({"batch": batch, "totals": totals, "rows": rows})
        print(f"batch {batch}: {json.dumps(totals)}")
        for r in rows:
            print(f"  {r['kind']:10} {r['shape']!s:22} x{r['layers']:<3} "
                  f"CL {r['channels_last_us']:8.2f}  NCHW {r['contiguous_us']:8.2f} us  "
                  f"bitwise {r['bitwise_equal']}")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
