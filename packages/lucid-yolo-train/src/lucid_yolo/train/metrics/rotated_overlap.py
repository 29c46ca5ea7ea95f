"""Exact IoU of rotated rectangles by convex polygon clipping (Sutherland–Hodgman).

The intersection of two convex polygons is the first polygon clipped successively by each edge's
inner half-plane of the second (Sutherland & Hodgman, "Reentrant polygon clipping", CACM 1974).
For two rectangles that is four clips of a quadrilateral, and the area of the result follows from
the shoelace formula. Every pair is clipped at once: polygons are fixed-size vertex buffers with a
vertex count, each clip writes up to two candidate vertices per input vertex (the vertex itself
when inside, the edge crossing when the edge crosses the line), and a stable sort moves the kept
candidates to the front. The buffer doubles per clip (4 → 64 slots), which also absorbs the extra
crossings that rounding can produce on nearly collinear edges, so no vertex is ever dropped.

A vertex on the clipping line counts as inside, so identical and edge-sharing rectangles give
their exact shared area. Computed in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lucid_yolo.models.geometry import xywhr_to_corners
from lucid_yolo.train.metrics import host_shortcuts


def polygon_area(vertices: Tensor, count: Tensor) -> Tensor:
    """Unsigned shoelace area of polygons held in padded vertex buffers.

    Args:
        vertices: (P, N, 2) vertices in order; slots at or beyond ``count`` are ignored.
        count: (P,) int64 number of valid vertices (0 gives area 0).

    Returns:
        (P,) float64 areas.
    """
    slots = torch.arange(vertices.shape[1], device=vertices.device)
    nxt = (slots[None, :] + 1) % count.clamp(min=1)[:, None]  # (P, N) wrap at each polygon's end
    following = torch.gather(vertices, 1, nxt[..., None].expand(-1, -1, 2))
    cross = vertices[..., 0] * following[..., 1] - vertices[..., 1] * following[..., 0]
    cross = torch.where(slots[None, :] < count[:, None], cross, 0.0)
    return cross.sum(dim=1).abs() / 2


def clip_convex(subject: Tensor, count: Tensor, clip: Tensor) -> tuple[Tensor, Tensor]:
    """Clip convex polygons by convex polygons, pair by pair (Sutherland–Hodgman).

    Args:
        subject: (P, N, 2) subject vertices; slots at or beyond ``count`` are ignored.
        count: (P,) int64 vertex count of each subject.
        clip: (P, M, 2) clipping polygons, all with M vertices in positive order.

    Returns:
        ``(vertices, count)`` of the intersections: (P, N * 2**M, 2) and (P,) int64.
    """
    for j in range(clip.shape[1]):
        a = clip[:, j][:, None, :]  # (P, 1, 2) edge start
        b = clip[:, (j + 1) % clip.shape[1]][:, None, :]
        subject, count = _clip_half_plane(subject, count, a, b)
    return subject, count


def _clip_half_plane(
    vertices: Tensor, count: Tensor, a: Tensor, b: Tensor
) -> tuple[Tensor, Tensor]:
    """Keep the part of each polygon left of the directed line ``a → b`` (one clipping pass)."""
    P, N, _ = vertices.shape
    slots = torch.arange(N, device=vertices.device)
    valid = slots[None, :] < count[:, None]  # (P, N)
    nxt = (slots[None, :] + 1) % count.clamp(min=1)[:, None]
    following = torch.gather(vertices, 1, nxt[..., None].expand(-1, -1, 2))
    edge = b - a
    side_cur = edge[..., 0] * (vertices[..., 1] - a[..., 1]) - edge[..., 1] * (
        vertices[..., 0] - a[..., 0]
    )
    side_nxt = edge[..., 0] * (following[..., 1] - a[..., 1]) - edge[..., 1] * (
        following[..., 0] - a[..., 0]
    )
    in_cur, in_nxt = side_cur >= 0, side_nxt >= 0
    crosses = in_cur != in_nxt
    t = side_cur / torch.where(crosses, side_cur - side_nxt, 1.0)
    crossing = vertices + (following - vertices) * t[..., None]
    candidates = torch.stack([vertices, crossing], dim=2).reshape(P, 2 * N, 2)  # (P, 2N, 2)
    keep = torch.stack([valid & in_cur, valid & crosses], dim=2).reshape(P, 2 * N)
    order = torch.argsort((~keep).to(torch.uint8), dim=1, stable=True)
    kept = torch.gather(candidates, 1, order[..., None].expand(-1, -1, 2))
    return kept, keep.sum(dim=1)


def rotated_overlaps(
    pred_rboxes: Tensor,
    target_rboxes: Tensor,
    crowd: Tensor,
    pairs: Tensor | None = None,
    chunk: int = 2**15,
    compact: bool | None = None,
) -> Tensor:
    """IoU of every predicted rotated box with every target one (crowd: intersection / pred area).

    Only pairs whose circumscribed circles meet (and that ``pairs`` selects) can overlap; the
    others get 0. On the CPU only those candidates are clipped. Elsewhere every pair is clipped
    and the others are masked to 0, because finding the candidates (``nonzero``) would make the
    host wait for the device once per call, and a validation loop must not (issue 11); the
    candidates' values are the same either way, each pair being clipped on its own. Clipping runs
    ``chunk`` pairs at a time to bound memory (about 6 KiB per pair at the last clip). Leading
    batch dimensions ``...`` are optional: a padded batch of images is clipped in one pass, each
    pair as it would be alone.

    Args:
        pred_rboxes: (..., n, 5) ``xywhr`` pixels, radians.
        target_rboxes: (..., m, 5) ``xywhr`` pixels, radians.
        crowd: (..., m) bool, crowd flag per target (intersection over the prediction's area).
        pairs: optional (..., n, m) bool, the pairs to compute (e.g. same class); default all.
        chunk: pairs clipped per pass.
        compact: clip only the candidates (a host synchronisation off the CPU); default: where
            the host's shortcuts are taken (:mod:`.host_shortcuts`).

    Returns:
        (..., n, m) float64 overlaps in [0, 1].
    """
    dev = pred_rboxes.device
    p = pred_rboxes.to(torch.float64)
    t = target_rboxes.to(device=dev, dtype=torch.float64)
    n, m = p.shape[-2], t.shape[-2]
    radius_p = torch.hypot(p[..., 2], p[..., 3]) / 2
    radius_t = torch.hypot(t[..., 2], t[..., 3]) / 2
    offset = p[..., :, None, :2] - t[..., None, :, :2]  # (..., n, m, 2)
    distance = torch.hypot(offset[..., 0], offset[..., 1])
    candidate = distance <= radius_p[..., :, None] + radius_t[..., None, :]
    if pairs is not None:
        candidate &= pairs.to(dev)
    shape = candidate.shape  # (..., n, m)
    candidate = candidate.reshape(-1)  # flat pair f: image f // (n·m), rows f // m of p
    if compact is None:
        compact = host_shortcuts.taken(dev)
    # flat indices of the pairs to clip: the candidates, or every pair
    everything = candidate.shape[0]
    clipped = (
        torch.nonzero(candidate).squeeze(1) if compact else torch.arange(everything, device=dev)
    )
    inter = torch.zeros(everything, dtype=torch.float64, device=dev)
    corners_p = xywhr_to_corners(p.reshape(-1, 5))  # (images·n, 4, 2)
    corners_t = xywhr_to_corners(t.reshape(-1, 5))  # (images·m, 4, 2)
    for start in range(0, clipped.shape[0], chunk):
        flat = clipped[start : start + chunk]
        target = flat // (n * m) * m + flat % m  # the pair's image, then its target column
        count = torch.full((flat.shape[0],), 4, dtype=torch.int64, device=dev)
        vertices, count = clip_convex(corners_p[flat // m], count, corners_t[target])
        area = torch.where(candidate[flat], polygon_area(vertices, count), 0.0)
        inter.index_copy_(0, flat, area)
    area_p = (p[..., 2] * p[..., 3])[..., :, None]  # (..., n, 1)
    area_t = (t[..., 2] * t[..., 3])[..., None, :]  # (..., 1, m)
    inter = torch.minimum(inter.reshape(shape), torch.minimum(area_p, area_t))
    union = area_p + area_t - inter
    denominator = torch.where(crowd.to(dev)[..., None, :], area_p, union)
    positive = denominator > 0
    return torch.where(positive, inter / torch.where(positive, denominator, 1.0), 0.0)


__all__ = ["clip_convex", "polygon_area", "rotated_overlaps"]
