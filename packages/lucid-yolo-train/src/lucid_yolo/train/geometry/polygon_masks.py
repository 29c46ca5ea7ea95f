"""Ground-truth instance masks rasterised from polygons at the source image's resolution.

COCO scores masks against the annotation rasterised at the image's own size, so the metric must
not see masks upsampled from the quarter-resolution training targets (whose edges are 4-pixel
steps and whose OpenCV fill also sets every pixel an edge touches). The rule here is the
geometric one: pixel ``(x, y)`` spans ``[x, x + 1) × [y, y + 1)`` and is set iff its centre
``(x + 0.5, y + 0.5)`` lies inside the polygon (even-odd rule; a centre on an edge belongs to the
region on the edge's right or lower side, so shapes that share an edge do not both claim it).

For polygons whose vertices lie on integer pixel corners this is exactly the mask the COCO API
rasterises (it traces edges on a 5× finer grid); for other polygons the two differ by a few
boundary pixels per instance (measured in ``docs/engineering/mask-accuracy.md``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

BoolMask = npt.NDArray[np.bool_]


def polygon_mask(polygon: npt.ArrayLike, height: int, width: int) -> BoolMask:
    """The pixels of a ``height × width`` image whose centres lie inside ``polygon``.

    A scanline fill: every edge that crosses the centre line of row ``y`` toggles the inside
    state from the first pixel whose centre is at or right of the crossing, so the cost is one
    pass over rows × edges and one cumulative sum over the image.

    Args:
        polygon: (p, 2) ``xy`` source pixels, p >= 3 (closed implicitly; any orientation).
        height: image rows.
        width: image columns.

    Returns:
        (height, width) bool.
    """
    points = np.asarray(polygon, dtype=np.float64).reshape(-1, 2)
    mask = np.zeros((height, width), dtype=np.bool_)
    if points.shape[0] < 3 or height == 0 or width == 0:
        return mask
    x0, y0 = points[:, 0], points[:, 1]
    x1, y1 = np.roll(x0, -1), np.roll(y0, -1)
    row_lo = max(int(np.floor(y0.min() - 0.5)), 0)
    row_hi = min(int(np.ceil(y0.max() + 0.5)), height)
    col_lo = max(int(np.floor(x0.min() - 0.5)), 0)
    col_hi = min(int(np.ceil(x0.max() + 0.5)), width)
    if row_lo >= row_hi or col_lo >= col_hi:
        return mask
    centre_y = np.arange(row_lo, row_hi, dtype=np.float64)[:, None] + 0.5  # (R, 1)
    # half-open in y: an edge covers centre rows in [min(y0, y1), max(y0, y1)), so a vertex on
    # a centre line is counted once and horizontal edges never cross
    crosses = (centre_y >= np.minimum(y0, y1)) & (centre_y < np.maximum(y0, y1))  # (R, E)
    dy = np.where(y1 != y0, y1 - y0, 1.0)
    cross_x = x0 + (centre_y - y0) / dy * (x1 - x0)  # (R, E)
    first_inside = np.clip(np.ceil(cross_x - 0.5), col_lo, col_hi).astype(np.int64) - col_lo
    rows, edges = np.nonzero(crosses)
    span = col_hi - col_lo + 1  # one spare column takes toggles right of the last pixel
    toggles = np.bincount(
        rows * span + first_inside[rows, edges], minlength=(row_hi - row_lo) * span
    )
    parity = np.cumsum(toggles.reshape(row_hi - row_lo, span)[:, :-1], axis=1) & 1  # (R, C)
    mask[row_lo:row_hi, col_lo:col_hi] = parity.astype(np.bool_)
    return mask


__all__ = ["BoolMask", "polygon_mask"]
