"""Instance masks from prototypes: linear combination, crop to the box, upsample.

An instance's mask logit map is ``coef · protos`` (YOLACT, Bolya et al. 2019) at stride 4.
Everything outside the instance's box is cleared, because a prototype combination is only
trained to be right inside its box. Binary masks are always thresholded *after* the logits are
resampled to the output grid (bilinear), then cropped to the box on that grid, so the edge of a
mask is placed to sub-prototype-pixel precision instead of following 4-pixel steps.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from lucid_yolo.models.exceptions import ModelError


def box_region(boxes: Tensor, height: int, width: int, scale: float = 1.0) -> Tensor:
    """Which pixels of a ``height × width`` grid have their centre inside each box.

    Args:
        boxes: (..., N, 4) ``xyxy`` in input pixels.
        height: grid rows.
        width: grid columns.
        scale: input pixels per grid cell (4 for prototype resolution).

    Returns:
        (..., N, height, width) bool.
    """
    ys = _centres(height, scale, boxes.device, boxes.dtype)
    xs = _centres(width, scale, boxes.device, boxes.dtype)
    inside_y, inside_x = _box_spans(boxes, ys, xs)
    return inside_x & inside_y


def _centres(count: int, scale: float, device: torch.device, dtype: torch.dtype) -> Tensor:
    """(count,) the centres of a grid's cells in input pixels."""
    return (torch.arange(count, device=device, dtype=dtype) + 0.5) * scale


def _box_spans(boxes: Tensor, ys: Tensor, xs: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`box_region` in two factors, rows (..., N, H, 1) and columns (..., N, 1, W), from
    the cells' centres ``ys`` (H,) and ``xs`` (W,)."""
    x1, y1, x2, y2 = (boxes[..., i, None, None] for i in range(4))
    inside_x = (xs >= x1) & (xs < x2)  # (..., N, 1, W)
    inside_y = (ys[:, None] >= y1) & (ys[:, None] < y2)  # (..., N, H, 1)
    return inside_y, inside_x


def mask_probabilities(coef: Tensor, protos: Tensor, boxes: Tensor) -> Tensor:
    """Cropped mask probabilities at prototype resolution (static shapes; export-friendly).

    Args:
        coef: (B, N, M) coefficients.
        protos: (B, M, h, w) prototypes (stride 4).
        boxes: (B, N, 4) ``xyxy`` input pixels.

    Returns:
        (B, N, h, w) probabilities, 0 outside each box.
    """
    B, M, h, w = protos.shape
    logits = torch.bmm(coef, protos.reshape(B, M, h * w)).reshape(B, -1, h, w)
    stride = 4.0
    return logits.sigmoid() * box_region(boxes, h, w, stride).to(logits.dtype)


def assemble_masks(
    coef: Tensor, protos: Tensor, boxes: Tensor, image_size: tuple[int, int]
) -> Tensor:
    """Binary instance masks at input resolution for one image.

    The logits are upsampled (bilinear) to the input size first and cropped there, so mask
    edges on the box border are exact rather than 4-pixel steps.

    Args:
        coef: (N, M) coefficients.
        protos: (M, h, w) prototypes.
        boxes: (N, 4) ``xyxy`` input pixels.
        image_size: ``(H, W)`` of the network input.

    Returns:
        (N, H, W) bool.
    """
    M, h, w = protos.shape
    height, width = image_size
    if coef.shape[0] == 0:
        return torch.zeros(0, height, width, dtype=torch.bool, device=protos.device)
    logits = (coef @ protos.reshape(M, h * w)).reshape(1, -1, h, w)
    logits = F.interpolate(logits, size=(height, width), mode="bilinear", align_corners=False)
    return (logits[0] > 0) & box_region(boxes, height, width)


@dataclass(frozen=True)
class ResampleGrid:
    """The sampling tables of one output grid (:func:`resample_grid`).

    Attributes:
        key: what it was made for (grid and prototype sizes, scale, pad, device, dtypes), which
            :func:`resample_masks` checks against its own arguments.
        rows: (H, h) bilinear weights of the grid's rows over the prototypes' rows.
        cols_t: (w, W) the same for the columns, transposed.
        ys: (H,) centres of the grid's rows in its own pixels.
        xs: (W,) centres of its columns.
    """

    key: tuple[object, ...]
    rows: Tensor
    cols_t: Tensor
    ys: Tensor
    xs: Tensor


def resample_grid(
    size: tuple[int, int],
    protos: Tensor,
    *,
    scale: float = 1.0,
    pad: tuple[float, float] = (0.0, 0.0),
    centre_dtype: torch.dtype = torch.float32,
) -> ResampleGrid:
    """The tables :func:`resample_masks` samples with for these arguments (``centre_dtype``:
    the boxes' dtype).

    Each table is kept across calls, per axis (callers must not modify them): the images of a
    data set often share a size, a width or a letterbox, and building a table is about twenty
    kernel launches that a GPU validation pass would otherwise pay per image and axis (issue
    11). A caller whose masks are built where nothing may outlive the call (a replayed fit's
    validation, in its graph pool's free blocks) makes the grids first and passes them in.
    """
    height, width = size
    _, h, w = protos.shape
    stride = 4.0
    device, dtype = protos.device, protos.dtype
    return ResampleGrid(
        key=_grid_key(size, protos, scale, pad, centre_dtype),
        rows=_weights(height, h, scale / stride, pad[1] / stride, device, dtype),
        cols_t=_weights(width, w, scale / stride, pad[0] / stride, device, dtype).T,
        ys=_kept_centres(height, device, centre_dtype),
        xs=_kept_centres(width, device, centre_dtype),
    )


def resample_masks(
    coef: Tensor,
    protos: Tensor,
    boxes: Tensor,
    size: tuple[int, int],
    *,
    scale: float = 1.0,
    pad: tuple[float, float] = (0.0, 0.0),
    max_values: int = 1 << 24,
    grid: ResampleGrid | None = None,
) -> Tensor:
    """Binary instance masks on a pixel grid related to the network input by an axis scaling.

    The grid is the one where ``input px = grid px * scale + pad``: the source image of a
    letterboxed input (the batch's ``scale_pad``), or the input itself (``scale=1``, no pad).
    Each grid pixel's centre is mapped into the prototypes and the logits are sampled bilinearly
    there (the same sampling as ``F.interpolate(..., mode="bilinear", align_corners=False)``,
    so the letterbox padding is cropped and the result resized in one exact step, with no
    rounding of the crop), then thresholded at 0 (probability 0.5) and cropped to the box.

    Memory stays bounded for large grids: logits are resampled a few instances at a time, at
    most ``max_values`` floats at once, and each chunk is thresholded and cropped straight into
    the result, which holds one byte per pixel and instance (no boolean temporaries beside it:
    a validation pass's masks sit beside a replayed fit's graph pool, issue 11).

    Args:
        coef: (N, M) coefficients.
        protos: (M, h, w) prototypes (stride 4 of the input).
        boxes: (N, 4) ``xyxy`` in *grid* pixels.
        size: ``(H, W)`` of the grid.
        scale: input pixels per grid pixel.
        pad: ``(pad_x, pad_y)`` input pixels before the grid's first column and row.
        max_values: float budget of one resampling chunk.
        grid: :func:`resample_grid` of the same arguments, made ahead; ``None`` finds it here.

    Returns:
        (N, H, W) bool.

    Raises:
        ModelError: ``grid`` was made for other arguments (:attr:`ResampleGrid.key`).
    """
    M, h, w = protos.shape
    height, width = size
    n = coef.shape[0]
    if n == 0 or height == 0 or width == 0:
        return torch.zeros(n, height, width, dtype=torch.bool, device=protos.device)
    if grid is None:
        grid = resample_grid(size, protos, scale=scale, pad=pad, centre_dtype=boxes.dtype)
    elif grid.key != _grid_key(size, protos, scale, pad, boxes.dtype):
        raise ModelError(
            f"the resampling grid was made for {grid.key!r}, asked for "
            f"{_grid_key(size, protos, scale, pad, boxes.dtype)!r} (grid size, prototype size, "
            "scale, pad, device, dtypes): make it with resample_grid and the same arguments"
        )
    # the box's rows and columns once for every instance (N·(H + W) flags), not per chunk
    inside_y, inside_x = _box_spans(boxes, grid.ys, grid.xs)
    flat_protos = protos.reshape(M, h * w)
    chunk = max(1, max_values // (height * max(width, w)))
    masks = torch.empty(n, height, width, dtype=torch.bool, device=protos.device)

    def fill(start: int, end: int) -> None:
        # one chunk's float logits alive at a time: they die when this returns
        logits = grid.rows @ (coef[start:end] @ flat_protos).reshape(-1, h, w) @ grid.cols_t
        part = masks[start:end]
        torch.gt(logits, 0, out=part)
        part &= inside_x[start:end]
        part &= inside_y[start:end]

    for start in range(0, n, chunk):
        fill(start, min(start + chunk, n))
    return masks


def _grid_key(
    size: tuple[int, int],
    protos: Tensor,
    scale: float,
    pad: tuple[float, float],
    centre_dtype: torch.dtype,
) -> tuple[object, ...]:
    """What a grid's tables depend on, so that a grid made ahead is only used where it fits."""
    _, h, w = protos.shape
    return (
        (int(size[0]), int(size[1])),
        (h, w),
        float(scale),
        (float(pad[0]), float(pad[1])),
        protos.device,
        protos.dtype,
        centre_dtype,
    )


@functools.lru_cache(maxsize=32)
def _weights(
    count: int, source: int, step: float, offset: float, device: torch.device, dtype: torch.dtype
) -> Tensor:
    # an ordinary tensor even when first asked for under inference mode (validation, predict)
    with torch.inference_mode(False), torch.no_grad():
        return _bilinear_weights(count, source, step, offset, device, dtype)


@functools.lru_cache(maxsize=32)
def _kept_centres(count: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """:func:`_centres` of a grid in its own pixels, kept for the next image of the same size."""
    with torch.inference_mode(False), torch.no_grad():
        return _centres(count, 1.0, device, dtype)


def _bilinear_weights(
    count: int, source: int, step: float, offset: float, device: torch.device, dtype: torch.dtype
) -> Tensor:
    """(count, source) weights that sample ``source`` cells at the centres of ``count`` cells.

    Output cell ``i`` has its centre at source coordinate ``(i + 0.5) * step + offset`` (in
    source cells, edge-based); the two nearest source centres are blended linearly, and
    positions beyond the first or last centre take that centre's value (border clamping).
    """
    centre = (torch.arange(count, device=device, dtype=dtype) + 0.5) * step + offset
    position = (centre - 0.5).clamp(0.0, source - 1.0)
    low = position.floor().clamp(max=source - 1.0)
    frac = position - low
    low_index = low.long()
    high_index = (low_index + 1).clamp(max=source - 1)
    weights = torch.zeros(count, source, device=device, dtype=dtype)
    weights.scatter_add_(1, low_index[:, None], (1.0 - frac)[:, None])
    weights.scatter_add_(1, high_index[:, None], frac[:, None])
    return weights


__all__ = [
    "ResampleGrid",
    "assemble_masks",
    "box_region",
    "mask_probabilities",
    "resample_grid",
    "resample_masks",
]
