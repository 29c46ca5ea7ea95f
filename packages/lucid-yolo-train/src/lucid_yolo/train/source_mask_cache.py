"""Ground-truth masks at the source size, built once and kept across validation passes.

Validation scores the same images every epoch, and each image's ground-truth masks are the same
every time: rasterised polygons or decoded RLEs at the source size (issue 11; about 0.5 ms of
host time per image at 640 px, and on a GPU a pinned copy per image before the transfer). The
cache keeps them by a digest of what defines them, the image size and every shape's bytes, so an
edited or another dataset misses and rebuilds rather than reading stale masks. Masks kept for a
GPU are pinned once, so their copies to the device are queued without pinning again. It holds at
most ``max_bytes`` of masks (one byte per pixel and instance); past that, masks are built as
before and not kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
from torch import Tensor

from lucid_yolo.train.geometry import RunLengthMask, SourceShape, source_masks

DEFAULT_MAX_BYTES = 1 << 30
"""Masks kept at most: 1 GiB (about 3,400 instances at 480 × 640)."""


class SourceMaskCache:
    """Each image's ground-truth masks at its source size, built on the first pass only.

    Args:
        max_bytes: the most mask bytes kept; 0 keeps none.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._masks: dict[bytes, Tensor] = {}
        self._bytes = 0

    def masks(
        self, shapes: Sequence[SourceShape], height: int, width: int, *, pinned: bool
    ) -> Tensor:
        """(len(shapes), height, width) bool on the CPU, as :func:`source_masks` builds them.

        Args:
            shapes: the image's polygons or RLEs in source pixels.
            height: source rows.
            width: source columns.
            pinned: in pinned memory (for an asynchronous copy to a GPU).

        Raises:
            RleError: an RLE of another size than the image.
        """
        key = _digest(shapes, height, width, pinned)
        kept = self._masks.get(key)
        if kept is not None:
            return kept
        masks = source_masks(shapes, height, width)
        if pinned:
            masks = masks.pin_memory()
        if self._bytes + masks.numel() <= self.max_bytes:
            self._masks[key] = masks
            self._bytes += masks.numel()
        return masks


def _digest(shapes: Sequence[SourceShape], height: int, width: int, pinned: bool) -> bytes:
    """What defines an image's masks: its size and each shape's kind, shape and bytes."""
    digest = hashlib.blake2b(f"{height}x{width}:{pinned}".encode(), digest_size=16)
    for shape in shapes:
        if isinstance(shape, RunLengthMask):
            digest.update(f"rle {shape.height}x{shape.width} {shape.runs.shape[0]}:".encode())
            digest.update(np.ascontiguousarray(shape.runs, dtype=np.int64).tobytes())
        else:
            polygon = np.ascontiguousarray(shape, dtype=np.float64)
            digest.update(f"polygon {polygon.shape!r}:".encode())
            digest.update(polygon.tobytes())
    return digest.digest()


__all__ = ["DEFAULT_MAX_BYTES", "SourceMaskCache"]
