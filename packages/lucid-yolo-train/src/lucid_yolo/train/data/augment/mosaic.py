"""Mosaic: four images tiled around a random centre on a canvas twice the network size.

Tile ``k`` (top-left, top-right, bottom-left, bottom-right) is placed with its inner corner on the
centre ``(xc, yc) ~ U(s/2, 3s/2)^2``; the part of a tile that does not fit falls outside the canvas,
never over a neighbour, so clipping to the canvas is clipping to the tile. The random affine that
follows maps the ``2s`` canvas onto the ``s`` network input (:mod:`.affine`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import reduce

import numpy as np

from lucid_yolo.train.data.augment.geometry import KeepRule
from lucid_yolo.train.data.augment.sample import Sample
from lucid_yolo.train.data.augment.warp import PAD_VALUE, clip_sample, transform_geometry


def mosaic4(
    tiles: Sequence[Sample], imgsz: int, rule: KeepRule, rng: np.random.Generator
) -> Sample:
    """Tile four samples on a ``2 imgsz`` square canvas.

    Args:
        tiles: four samples, each at most ``imgsz`` on its long side; the first is the primary
            (its ``image_id``, ``orig_size`` and ``scale_pad`` are kept).
        imgsz: network input size ``s``.
        rule: keep rule for instances cut by the canvas edge.
        rng: random source (draws the centre).

    Returns:
        The (2s, 2s, 3) mosaic with all four tiles' instances, clipped to the canvas; instance
        count = sum of the tiles' minus those the keep rule dropped (counted in ``drops``).

    Raises:
        ValueError: not exactly four tiles.
    """
    if len(tiles) != 4:
        raise ValueError(f"mosaic4 takes 4 tiles, got {len(tiles)!r}; pass the primary + 3 others")
    side = 2 * imgsz
    xc = int(rng.uniform(imgsz / 2, 3 * imgsz / 2))
    yc = int(rng.uniform(imgsz / 2, 3 * imgsz / 2))
    canvas = np.full((side, side, 3), PAD_VALUE, dtype=np.uint8)
    placed: list[Sample] = []
    for k, tile in enumerate(tiles):
        h, w = tile.height, tile.width
        x1a, y1a, x2a, y2a = _canvas_box(k, xc, yc, w, h, side)
        x1b = w - (x2a - x1a) if k in (0, 2) else 0
        y1b = h - (y2a - y1a) if k in (0, 1) else 0
        canvas[y1a:y2a, x1a:x2a] = tile.image[y1b : y1b + (y2a - y1a), x1b : x1b + (x2a - x1a)]
        shift = np.array([[1.0, 0.0, x1a - x1b], [0.0, 1.0, y1a - y1b]], dtype=np.float64)
        placed.append(transform_geometry(tile, shift, canvas))
    merged = reduce(Sample.with_instances_of, placed[1:], placed[0])
    drops = replace(placed[0].drops)
    for tile in placed[1:]:
        drops.add(tile.drops)
    return clip_sample(replace(merged, image=canvas, drops=drops), rule)


def _canvas_box(k: int, xc: int, yc: int, w: int, h: int, side: int) -> tuple[int, int, int, int]:
    if k == 0:
        return max(xc - w, 0), max(yc - h, 0), xc, yc
    if k == 1:
        return xc, max(yc - h, 0), min(xc + w, side), yc
    if k == 2:
        return max(xc - w, 0), yc, xc, min(yc + h, side)
    return xc, yc, min(xc + w, side), min(yc + h, side)


__all__ = ["mosaic4"]
