"""Import every YOLO26 variant saved by Ultralytics and compare eval outputs bitwise.

For each of the 20 variants (n/s/m/l/x × detect, segment, pose, OBB): build it with Ultralytics
from its YAML (no weights downloaded), give its BatchNorms non-trivial statistics, save it as
Ultralytics saves a model (``YOLO.save``: a pickled checkpoint, float16), read the file back both
with Ultralytics and with :func:`lucid_yolo.models.read_weights`, run both in eval mode on the same
input and compare every raw output (both branches, prototypes) and the end-to-end detections.
Prints a table; with ``$OUT`` set also writes ``$OUT/ultralytics_import.json``.

Ultralytics is a test peer, not a dependency: run this in an environment that has it, with the
workspace sources on the path, e.g. on CPU::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) /tmp/ulvenv/bin/python \\
        tools/check_ultralytics_import.py

and on the GPU machine (Ultralytics carried as a wheel)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 tools/check_ultralytics_import.py \\
        --device cuda --imgsz 640
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from lucid_yolo.models import load_weights, read_weights
from ultralytics_peer import (
    build_reference,
    compare,
    compare_decoded,
    load_reference,
    perturb_statistics,
    reference_outputs,
)

TASKS = ("detect", "segment", "pose", "obb")
SCALES = ("n", "s", "m", "l", "x")


def check_variant(
    task: str, scale: str, args: argparse.Namespace, folder: Path
) -> dict[str, object]:
    """Save one variant as the reference does, import it, compare; one table row."""
    started = time.perf_counter()
    wrapper = build_reference(task, scale)
    perturb_statistics(wrapper)
    path = folder / f"yolo26{scale}-{task}.pt"
    wrapper.save(path)
    device = torch.device(args.device)
    height, width = args.imgsz, args.imgsz * 3 // 2 // 32 * 32
    images = torch.rand(args.batch, 3, height, width, generator=torch.Generator().manual_seed(0))
    images = images.to(device)
    reference = reference_outputs(load_reference(path).to(device), images)
    weights = read_weights(path)
    model = weights.build()
    report = load_weights(model, weights)
    model = model.to(device).eval()
    with torch.no_grad():
        ours = model(images)
    rows = compare(ours, reference)
    return {
        "variant": weights.model_name,
        "params": sum(p.numel() for p in model.parameters()),
        "tensors": report.loaded,
        "ignored": len(report.dropped),
        "outputs": len(rows),
        "bitwise": all(row["bitwise"] for row in rows.values()),
        "max_abs_diff": max(row["max_abs_diff"] for row in rows.values()),
        "decoded_bitwise": compare_decoded(task, ours, reference, (height, width)),
        "seconds": round(time.perf_counter() - started, 1),
        "detail": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--imgsz", type=int, default=64, help="input height; width is 1.5x")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--scales", nargs="+", default=list(SCALES), choices=SCALES)
    args = parser.parse_args()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in args.tasks:
            for scale in args.scales:
                row = check_variant(task, scale, args, Path(tmp))
                rows.append(row)
                print(
                    f"| {row['variant']:<14} | {row['params']:>10,} | {row['tensors']:>4} | "
                    f"{row['ignored']:>3} | {row['outputs']:>2} | {row['bitwise']!s:<5} | "
                    f"{row['max_abs_diff']:.1e} | {row['decoded_bitwise']!s:<5} |",
                    flush=True,
                )
    meta = {
        "torch": torch.__version__,
        "device": args.device,
        "input": [args.batch, 3, args.imgsz, args.imgsz * 3 // 2 // 32 * 32],
    }
    print(json.dumps(meta))
    out = os.environ.get("OUT")
    if out:
        Path(out, "ultralytics_import.json").write_text(
            json.dumps({**meta, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
