"""Time the MuSGD + EMA update step alone, natively and replayed, per model: why segment costs more.

Issue 11 measured the replayed update at 13 ms per step for segment at batch 4 against 6.6 ms for
detect (the trainer's ``update`` phase, CUDA events from the end of the backward to the end of
the batch). This tool takes the update out of the fit: a fresh model, MuSGD over its parameter
groups and the trainer's EMA, random gradients, and the trainer's
:class:`~lucid_yolo.train.replay.UpdateStep`. It reports, per model and mode, device milliseconds
per step between CUDA events (synchronised at both ends of the window) and host milliseconds to
issue one step (no synchronisation), replayed with and without the late non-finite check's
backup, for each MuSGD ``ns_max_flop_ratio`` asked for (2.0, CUDA's default, against 1.0, one
Newton–Schulz stack per matrix shape), plus the model's parameter tensors, matrices, their shapes
and Newton–Schulz stacks, and the kernels one native update dispatches (counted on the CPU).
``--ns-dtypes`` and ``--ns-steps`` time MuSGD's orthogonalisation in another compute dtype or
with another iteration count (``--ns-steps 5 0``: what the Newton–Schulz part of an update costs).
Rounds alternate the runs; the JSON is rewritten and the rows printed after each round, so a run
cut short keeps what finished. Times are only clean on a GPU the run has to itself.

Example (GPU machine, from the repository root)::

    export PYTHONPATH=$(ls -d packages/*/src | paste -sd:)
    python3 tools/bench_update_step.py --models yolo26n yolo26n-seg --out $OUT/update_step.json
    python3 tools/bench_update_step.py --memory-format channels_last --out $OUT/update_cl.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from dispatch_count import VIEW_OPS, DispatchCount
from lucid_yolo.models import create_model
from lucid_yolo.train.optim import NEWTON_SCHULZ_DTYPES, MuSGD, param_groups, trainer_ema
from lucid_yolo.train.replay import UpdateStep

MODES = ("native", "replay", "replay-backup")
"""``replay-backup``: replayed with the backup the late non-finite check needs (the fit's default
in fp32 and bf16 when the update replays)."""

MEMORY_FORMATS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}
"""``--memory-format``: the layout of the timed models' weights (the CPU counts stay contiguous)."""


def _build(
    name: str,
    device: str,
    replay: bool,
    backup: bool = False,
    memory_format: torch.memory_format = torch.contiguous_format,
    ns_max_flop_ratio: float = 2.0,
    ns_dtype: torch.dtype = torch.float32,
    ns_steps: int = 5,
) -> tuple[MuSGD, UpdateStep]:
    torch.manual_seed(0)
    net = create_model(name, num_classes=80).to(device)
    net = net.to(memory_format=memory_format)
    ema = trainer_ema(net)
    optimizer = MuSGD(
        param_groups(net, weight_decay=5e-4),
        lr=0.01,
        weight_decay=5e-4,
        ns_max_flop_ratio=ns_max_flop_ratio,
        ns_dtype=ns_dtype,
        ns_steps=ns_steps,
    )
    step = UpdateStep(optimizer, ema, replay=replay, backup=backup)
    for p in net.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    return optimizer, step


def describe(name: str) -> dict[str, Any]:
    """Parameter tensors, matrices, their shapes and Newton–Schulz stacks, and the kernels of one
    native update (CPU)."""
    optimizer, _ = _build(name, "cpu", replay=False)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    matrices = [p for p in params if p.ndim >= 2]
    shapes = Counter((p.shape[0], p.numel() // p.shape[0]) for p in matrices)
    with DispatchCount(ignore=VIEW_OPS) as count:
        optimizer.step()
    return {
        "parameters": sum(p.numel() for p in params),
        "tensors": len(params),
        "matrices": len(matrices),
        "shapes": len(shapes),
        "ns_stacks": [list(shape) for shape in optimizer.ns_stack_shapes],
        "kernels": sum(count.ops.values()),
        "kernels_by_op": dict(count.ops.most_common()),
    }


def _time(optimizer: MuSGD, steps: int) -> tuple[float, float]:
    """Device ms per step (events) and host ms to issue one step."""
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    torch.cuda.synchronize()
    start.record()
    host = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    host_ms = (time.perf_counter() - host) * 1000.0 / steps
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / steps, host_ms


_Key = tuple[str, float, str, int, str]
"""A timed run: model, ``ns_max_flop_ratio``, ``ns_dtype`` name, ``ns_steps``, mode."""


def _rows(samples: dict[_Key, list[tuple[float, float]]]) -> list[dict[str, Any]]:
    """One row per timed run: medians (and the device range) over the rounds."""
    return [
        {
            "model": name,
            "ns_max_flop_ratio": ratio,
            "ns_dtype": dtype,
            "ns_steps": ns_steps,
            "mode": mode,
            "device_ms": round(statistics.median(r[0] for r in rows), 3),
            "device_ms_range": [
                round(min(r[0] for r in rows), 3),
                round(max(r[0] for r in rows), 3),
            ],
            "host_ms": round(statistics.median(r[1] for r in rows), 3),
            "rounds": len(rows),
        }
        for (name, ratio, dtype, ns_steps, mode), rows in samples.items()
        if rows
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["yolo26n", "yolo26n-seg"])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--flop-ratios",
        type=float,
        nargs="+",
        default=[2.0, 1.0],
        help="MuSGD ns_max_flop_ratio values to time (1.0: one Newton-Schulz stack per shape)",
    )
    parser.add_argument(
        "--ns-dtypes",
        nargs="+",
        choices=sorted(NEWTON_SCHULZ_DTYPES),
        default=["bfloat16"],
        help="MuSGD ns_dtype values to time (bfloat16 is MuSGD's default on CUDA)",
    )
    parser.add_argument(
        "--ns-steps",
        type=int,
        nargs="+",
        default=[5],
        help="MuSGD ns_steps values to time (5, the default's; 0 leaves the orthogonalisation out)",
    )
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--memory-format",
        choices=sorted(MEMORY_FORMATS),
        default="contiguous",
        help="layout of the timed models' conv weights (fits on CUDA default to channels_last)",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    memory_format = MEMORY_FORMATS[args.memory_format]
    report: dict[str, Any] = {"memory_format": args.memory_format, "models": {}, "rows": []}
    for name in args.models:
        report["models"][name] = describe(name)
        print(
            name,
            json.dumps({k: v for k, v in report["models"][name].items() if k != "kernels_by_op"}),
            flush=True,
        )
    runs = {
        (name, ratio, dtype, ns_steps, mode): _build(
            name,
            "cuda",
            replay=mode.startswith("replay"),
            backup=mode == "replay-backup",
            memory_format=memory_format,
            ns_max_flop_ratio=ratio,
            ns_dtype=NEWTON_SCHULZ_DTYPES[dtype],
            ns_steps=ns_steps,
        )[0]
        for name in args.models
        for ratio in args.flop_ratios
        for dtype in args.ns_dtypes
        for ns_steps in args.ns_steps
        for mode in args.modes
    }
    for optimizer in runs.values():
        _time(optimizer, 3)  # native warm-up step, then the recording
    samples: dict[_Key, list[tuple[float, float]]] = {key: [] for key in runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for round_index in range(args.rounds):
        keys = list(runs) if round_index % 2 == 0 else list(runs)[::-1]
        for key in keys:
            samples[key].append(_time(runs[key], args.steps))
        report["rows"] = _rows(samples)
        args.out.write_text(json.dumps(report, indent=1))  # a cut run keeps the finished rounds
        print(f"round {round_index + 1}/{args.rounds}", flush=True)
        for row in report["rows"]:
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
