"""A batch's mask overlaps three ways, timed alone: image by image, and in padded groups two ways.

Session 24 (docs/engineering/whole-fit-speed.md) scored a GPU validation batch's mask overlaps in
padded groups of images, with a batched product of shape (images, rows, H·W) × (images, H·W,
targets): on a trained network (about ten rows an image) it halved the overlaps' host time, but
the replayed segment fit lost 15.6 s of validation in its first passes, where an untrained
network gives up to 300 rows an image, and it was taken back without knowing which part cost
the seconds. This probe times, per rows an image, on one device:

* ``per-image``: the metric's path, :func:`~lucid_yolo.train.metrics.mask_overlaps` per image
  written into the batch's (B, D, G) overlaps;
* ``grouped-bmm``: the images padded into one frame, intersections by one batched product per
  chunk of rows (session 24's change);
* ``grouped-mm``: the same frame, intersections by one ordinary product of every row of the
  group against every target column of it (cross-image blocks computed and thrown away; a few
  targets an image), the per-image product's shape family.

Each variant's result is compared with ``per-image`` bit for bit. Reported per rows an image
and variant: the host's seconds per batch without synchronising (what a validation loop bound
by its launches pays), the seconds per batch with the device synchronised at both ends, and the
peak memory allocated in a call. Variants alternate call by call over ``--rounds``.

Run (GPU machine, from source; ``$OUT/probe_mask_overlaps.json``)::

    python3 tools/probe_mask_overlaps.py --rows 10 300 --rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lucid_yolo.train.metrics import mask_overlaps
from lucid_yolo.train.metrics.overlaps import _divide

Image = tuple[Tensor, Tensor, Tensor]
"""One image's predicted masks (r, H, W), prediction rows (r,) and target masks (t, H, W)."""
SIZES = [(480, 640), (640, 480), (640, 640), (427, 640)]
"""Source sizes of the batch's images, as a COCO-like set has them."""


def make_batch(rows: int, targets: int, rows_in_batch: int, device: str, seed: int) -> list[Image]:
    """One image a size of :data:`SIZES`, random masks; image ``k`` has ``rows // (k + 1)``
    prediction rows (of ``rows_in_batch``) and ``targets - k`` targets (at least one), so that
    a padded group pads rows, columns and pixels, as a real batch's does."""
    g = torch.Generator().manual_seed(seed)
    batch = []
    for k, (height, width) in enumerate(SIZES):
        ids = torch.randperm(rows_in_batch, generator=g)[: rows // (k + 1)].sort().values
        predicted = torch.rand(ids.shape[0], height, width, generator=g) < 0.05
        target = torch.rand(max(1, targets - k), height, width, generator=g) < 0.05
        batch.append((predicted.to(device), ids.to(device), target.to(device)))
    return batch


def per_image(batch: list[Image], crowd: Tensor, shape: tuple[int, int, int]) -> Tensor:
    """The metric's path on a GPU: each image's overlaps alone, written at its rows and
    columns of the batch's (B, D, G) overlaps, -1 elsewhere."""
    B, D, G = shape
    out = torch.full((B, D, G), -1.0, dtype=torch.float64, device=crowd.device)
    for i, (predicted, ids, target) in enumerate(batch):
        columns = torch.arange(target.shape[0], device=crowd.device)
        values = mask_overlaps(predicted, target, crowd[i][columns])
        out[i, ids[:, None], columns[None, :]] = values
    return out


def _padded(masks: list[Tensor], height: int, width: int) -> Tensor:
    """(len(masks), most rows, height, width) bool, each image's masks in its top-left corner."""
    rows = max(m.shape[0] for m in masks)
    out = torch.zeros(len(masks), rows, height, width, dtype=torch.bool, device=masks[0].device)
    for k, m in enumerate(masks):
        out[k, : m.shape[0], : m.shape[1], : m.shape[2]] = m
    return out


def grouped(batch: list[Image], crowd: Tensor, shape: tuple[int, int, int], product: str) -> Tensor:
    """The whole batch as one padded group; intersections by ``product`` ("bmm" or "mm")."""
    B, D, G = shape
    device = crowd.device
    height = max(p.shape[1] for p, _, _ in batch)
    width = max(p.shape[2] for p, _, _ in batch)
    predicted = _padded([p for p, _, _ in batch], height, width).flatten(2)  # (g, n, P)
    target = _padded([t for _, _, t in batch], height, width).flatten(2)  # (g, m, P)
    g, n, pixels = predicted.shape
    m = target.shape[1]
    area_p = predicted.sum(dim=2, dtype=torch.float64)
    area_t = target.sum(dim=2, dtype=torch.float64)
    inter = torch.zeros(g, n, m, dtype=torch.float64, device=device)
    chunk = max(1, (1 << 24) // (g * pixels))
    if product == "bmm":
        t = target.to(torch.float32).transpose(1, 2)
        for start in range(0, n, chunk):
            p = predicted[:, start : start + chunk].to(torch.float32)
            inter[:, start : start + chunk] = torch.bmm(p, t).to(torch.float64)
    else:
        t = target.reshape(g * m, pixels).to(torch.float32).T  # (P, g·m)
        images = torch.arange(g, device=device)
        for start in range(0, n, chunk):
            p = predicted[:, start : start + chunk].to(torch.float32)  # (g, c, P)
            c = p.shape[1]
            every = (p.reshape(g * c, pixels) @ t).reshape(g, c, g, m)
            inter[:, start : start + c] = every[images, :, images].to(torch.float64)
    union = area_p[:, :, None] + area_t[:, None, :] - inter
    values = _divide(inter, union, area_p, crowd[:, :m])
    # padded rows and columns land in a spare last row and column, cut off at the end
    out = torch.full((B, D + 1, G + 1), -1.0, dtype=torch.float64, device=device)
    rows = torch.nn.utils.rnn.pad_sequence([r for _, r, _ in batch], True, padding_value=D)
    columns = torch.nn.utils.rnn.pad_sequence(
        [torch.arange(t.shape[0], device=device) for _, _, t in batch], True, padding_value=G
    )
    index = torch.arange(g, device=device)
    out[index[:, None, None], rows[:, :, None], columns[:, None, :]] = values
    return out[:, :D, :G]


VARIANTS: dict[str, Callable[[list[Image], Tensor, tuple[int, int, int]], Tensor]] = {
    "per-image": per_image,
    "grouped-bmm": lambda b, c, s: grouped(b, c, s, "bmm"),
    "grouped-mm": lambda b, c, s: grouped(b, c, s, "mm"),
}


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per rows an image and variant: same bits as ``per-image``, medians of host and
    synchronised ms, peak MiB allocated in a call (CUDA)."""
    results = []
    D, G = 300, args.targets
    for rows in args.rows:
        batch = make_batch(rows, args.targets, D, args.device, seed=rows)
        crowd = torch.zeros(len(batch), G, dtype=torch.bool, device=args.device)
        shape = (len(batch), D, G)
        expected = per_image(batch, crowd, shape)
        samples: dict[str, dict[str, list[float]]] = {
            name: {"host": [], "synced": [], "peak": []} for name in VARIANTS
        }
        same = {}
        for name, variant in VARIANTS.items():  # warm-up, and the bits
            same[name] = bool(torch.equal(variant(batch, crowd, shape), expected))
        for _ in range(args.rounds):
            for name, variant in VARIANTS.items():
                _sync(args.device)
                if args.device == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                start = time.perf_counter()
                variant(batch, crowd, shape)
                samples[name]["host"].append(time.perf_counter() - start)
                _sync(args.device)
                samples[name]["synced"].append(time.perf_counter() - start)
                if args.device == "cuda":
                    samples[name]["peak"].append(torch.cuda.max_memory_allocated() - base)
        for name, seen in samples.items():
            results.append(
                {
                    "rows_per_image": rows,
                    "variant": name,
                    "same_bits": same[name],
                    "host_ms": round(1e3 * statistics.median(seen["host"]), 3),
                    "synced_ms": round(1e3 * statistics.median(seen["synced"]), 3),
                    "peak_mib": round(max(seen["peak"], default=0) / 2**20, 1),
                }
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10, 300], help="rows an image")
    parser.add_argument("--targets", type=int, default=5, help="target masks an image")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    results = measure(args)
    print("| rows an image | variant | same bits | host ms | synced ms | peak MiB |")
    print("|---:|---|---|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['rows_per_image']} | {r['variant']} | {r['same_bits']} | {r['host_ms']} | "
            f"{r['synced_ms']} | {r['peak_mib']} |"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "probe_mask_overlaps.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
