"""Seconds of one MuSGD orthogonalisation of a model's matrices on the CPU, padded and not.

MuSGD zero-pads matrices of several shapes into a few stacks where a step's cost is its kernel
launches (CUDA) and, since session 39, stacks only equal shapes elsewhere
(``lucid_yolo.train.optim.PADDED_FLOP_RATIOS``). This tool is the CPU measurement behind that
default: for each ``ns_max_flop_ratio`` and compute dtype asked for, it builds the model's
:class:`~lucid_yolo.train.optim.ShapeBuckets` (the model's matrices as MuSGD groups them, 80
classes as in ``tools/bench_update_step.py``), orthogonalises random updates once untimed, then
``--repeats`` times, and reports the stacks and the mean wall seconds of a call, on
``--threads`` intra-op threads (one: the test suite's setting under xdist).

Run (dev machine, repository root)::

    uv run python tools/bench_orthogonalise_cpu.py --out /tmp/orthogonalise
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import cast

import torch

from lucid_yolo.models import create_model
from lucid_yolo.train.optim import NEWTON_SCHULZ_DTYPES, NewtonSchulzDtype, ShapeBuckets


def time_orthogonalise(
    name: str, ratio: float, dtype_name: str, repeats: int
) -> dict[str, float | int | str]:
    """One row: the model's matrices in stacks of ``ratio``, orthogonalised in ``dtype_name``."""
    torch.manual_seed(0)
    net = create_model(name, num_classes=80)
    matrices = [p.detach() for p in net.parameters() if p.ndim >= 2]
    buckets = ShapeBuckets(matrices, max_flop_ratio=ratio)
    updates = [torch.randn_like(m) for m in matrices]
    dtype = NEWTON_SCHULZ_DTYPES[cast(NewtonSchulzDtype, dtype_name)]
    buckets.orthogonalise(updates, steps=5, dtype=dtype)
    start = time.perf_counter()
    for _ in range(repeats):
        buckets.orthogonalise(updates, steps=5, dtype=dtype)
    seconds = (time.perf_counter() - start) / repeats
    return {
        "model": name,
        "ns_max_flop_ratio": ratio,
        "ns_dtype": dtype_name,
        "matrices": len(matrices),
        "stacks": len(buckets.stack_shapes),
        "seconds": round(seconds, 4),
    }


def table(rows: list[dict[str, float | int | str]]) -> str:
    lines = [
        "| model | ns_max_flop_ratio | dtype | matrices | stacks | s a call |",
        "|---|---:|---|---:|---:|---:|",
    ]
    lines += [
        f"| {r['model']} | {r['ns_max_flop_ratio']} | {r['ns_dtype']} | {r['matrices']} | "
        f"{r['stacks']} | {r['seconds']:.3f} |"
        for r in rows
    ]
    return "\n".join(lines)


def main() -> list[dict[str, float | int | str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["yolo26n"])
    parser.add_argument("--flop-ratios", type=float, nargs="+", default=[2.0, 1.0])
    parser.add_argument(
        "--dtypes", nargs="+", default=["float32", "bfloat16"], choices=sorted(NEWTON_SCHULZ_DTYPES)
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [
        time_orthogonalise(name, ratio, dtype_name, args.repeats)
        for name in args.models
        for ratio in args.flop_ratios
        for dtype_name in args.dtypes
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"threads": args.threads, "repeats": args.repeats, "torch": torch.__version__}
    (args.out / "orthogonalise_cpu.json").write_text(json.dumps({**report, "rows": rows}, indent=2))
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
