"""Device memory that finishing a batch's deferred pixels takes, beyond the batch itself.

Why (issue 11, memory): in a replayed fit the previous step's activations stay in the graph pool,
so the data path's device work (:class:`~lucid_yolo.train.data.augment.DevicePixels`: HSV jitter,
flips, mask unpacking) cannot reuse their freed blocks as it does natively, and its transient adds
to the reserved bytes outside the pool (docs/engineering/replay-memory.md, item 10).

It measures one synthetic 640 px training batch (random pixels, HSV gains and flips, and with
``--masks`` bit-packed segment masks), after the conversion tables are built:

* on CUDA, ``torch.cuda.max_memory_allocated`` during the call, minus what was allocated before;
* on any device, the peak of bytes held by tensors the call created (:class:`LiveBytes`, a
  dispatch mode that follows each new storage until it is freed). On the CPU this is the only
  measure, and it counts what the CUDA allocator would be asked for, before its rounding.

Both include the finished images and masks, which outlive the call. The batch's own input
tensors are not counted.

Run (from the repository root; one JSON line on stdout, and into ``--out``)::

    export PYTHONPATH=$(ls -d packages/*/src | paste -sd:)
    python3 tools/device_pixels_memory.py --batch 16 --masks 100 --out $OUT/device_pixels.json
"""

from __future__ import annotations

import argparse
import json
import weakref
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from lucid_yolo.train.data.augment import DevicePixels
from lucid_yolo.train.data.batch import Batch

MIB = 2**20


class LiveBytes(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch stub gap
    """``with LiveBytes(*inputs) as held: ...`` then ``held.peak``: the most bytes that tensors
    created inside the block held at once; ``held.operators``: the operators it ran that are not
    views (on CUDA, about one kernel launch each).

    Every operator's outputs are looked at once they return: a storage not seen before counts
    its bytes until Python frees it. Views and in-place results share a storage already seen,
    so they count nothing. The storages of ``inputs`` (and of views of them) are never counted.
    """

    def __init__(self, *inputs: torch.Tensor) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.live = 0
        self.peak = 0
        self.operators = 0
        self._seen = {tensor.untyped_storage().data_ptr() for tensor in inputs}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            self.operators += 1
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self._count(leaf.untyped_storage())
        return out

    def _count(self, storage: torch.UntypedStorage) -> None:
        pointer, size = storage.data_ptr(), storage.nbytes()
        if size == 0 or pointer in self._seen:
            return
        self._seen.add(pointer)
        self.live += size
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._release, pointer, size)

    def _release(self, pointer: int, size: int) -> None:
        self._seen.discard(pointer)
        self.live -= size


def synthetic_batch(
    batch: int, imgsz: int, masks: int, device: torch.device, seed: int = 0
) -> Batch:
    """A training batch with every pixel pass deferred: random (B, 3, imgsz, imgsz) uint8
    images, (B, 3) gains in YOLO's default ranges, flips for about half the images, and with
    ``masks > 0`` (B, masks, imgsz / 4, imgsz / 32) packed mask bytes."""
    rng = np.random.default_rng(seed)
    amplitudes = np.array([0.015, 0.7, 0.4])
    fields: dict[str, Any] = {
        "images": torch.from_numpy(rng.integers(0, 256, (batch, 3, imgsz, imgsz), np.uint8)),
        "deferred_hsv": torch.from_numpy(rng.uniform(-1, 1, (batch, 3)) * amplitudes + 1),
        "deferred_flip": torch.from_numpy(rng.random(batch) < 0.5),
    }
    if masks:
        packed = (batch, masks, imgsz // 4, imgsz // 32)
        fields["deferred_masks"] = torch.from_numpy(rng.integers(0, 256, packed, np.uint8))
    return cast(Batch, {key: value.to(device) for key, value in fields.items()})


def measure(pixels: DevicePixels, batch: Batch) -> dict[str, int | None]:
    """Peak bytes and operators :class:`LiveBytes` counts while ``pixels`` finishes ``batch``,
    and on CUDA the allocator's peak allocated bytes above those allocated before the call."""
    inputs = [value for value in batch.values() if isinstance(value, torch.Tensor)]
    device = inputs[0].device
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    with LiveBytes(*inputs) as held:
        pixels(batch)
    if cuda:
        torch.cuda.synchronize(device)
    allocated = torch.cuda.max_memory_allocated(device) - before if cuda else None
    return {
        "live_peak_bytes": held.peak,
        "operators": held.operators,
        "cuda_peak_allocated_bytes": allocated,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--masks", type=int, default=0, help="instances per image (segment)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    device = torch.device(args.device)
    pixels = DevicePixels()
    pixels(synthetic_batch(1, args.imgsz, 0, device))  # builds the conversion tables
    batch = synthetic_batch(args.batch, args.imgsz, args.masks, device)
    images_bytes = batch["images"].nbytes
    result: dict[str, Any] = {
        "device": str(device),
        "batch": args.batch,
        "imgsz": args.imgsz,
        "masks": args.masks,
        "images_bytes": images_bytes,
        **measure(pixels, batch),
    }
    line = json.dumps(result)
    print(line)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(line + "\n")
    for key in ("live_peak_bytes", "cuda_peak_allocated_bytes"):
        if result[key] is not None:
            print(f"{key}: {result[key] / MIB:.1f} MiB ({result[key] / images_bytes:.2f} x images)")


if __name__ == "__main__":
    main()
