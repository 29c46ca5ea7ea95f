"""Letterbox: fit an image into a square network input keeping its aspect, pad with grey.

Forward: ``input px = source px * scale + pad`` with one ``scale`` for x and y and integer pads that
centre the image. The ``(scale, pad_x, pad_y)`` triple travels in ``Batch["scale_pad"]`` so metrics
and prediction can map outputs back to the source image with :func:`unletterbox_boxes` /
:func:`unletterbox_points` / :func:`unletterbox_rboxes` (torch, batched).
"""

from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np
import torch
from torch import Tensor

from lucid_yolo.train.data.augment.sample import Sample, UInt8Array
from lucid_yolo.train.data.augment.warp import PAD_VALUE, transform_geometry


def fit_size(height: int, width: int, imgsz: int) -> tuple[float, int, int]:
    """Scale that fits ``(height, width)`` into ``imgsz`` on its long side.

    Returns:
        ``(scale, new_height, new_width)`` with ``new_* = round(* x scale)``, each >= 1.
    """
    scale = imgsz / max(height, width)
    return scale, max(1, round(height * scale)), max(1, round(width * scale))


def resize_long_side(image: UInt8Array, imgsz: int) -> UInt8Array:
    """Resize (H, W, 3) uint8 so its long side is ``imgsz``; area filter when shrinking.

    Both axes scale by exactly ``imgsz / long side``, the one ratio ``scale_pad`` carries: the
    short side's pixel count is rounded, its content is not stretched to fill it. (Resizing to
    the rounded size stretched the short axis by up to half a pixel, which put boxes mapped back
    to the source off by up to 1.85 source pixels at its far end, issue 13.) OpenCV keeps the
    given factors only when it picks the size itself, which it rounds as :func:`fit_size` does.
    """
    h, w = image.shape[:2]
    scale, new_h, new_w = fit_size(h, w, imgsz)
    if (new_h, new_w) == (h, w):
        return image
    interp = cv2.INTER_AREA if new_h < h else cv2.INTER_LINEAR
    if round(h * scale) < 1 or round(w * scale) < 1:  # a sliver: no whole pixel at this scale
        return np.asarray(cv2.resize(image, (new_w, new_h), interpolation=interp), np.uint8)
    resized = cv2.resize(image, (0, 0), fx=scale, fy=scale, interpolation=interp)
    return np.asarray(resized, dtype=np.uint8)


def letterbox(sample: Sample, imgsz: int) -> Sample:
    """Fit a sample into an ``imgsz x imgsz`` canvas, centred, grey-padded.

    Args:
        sample: any size; its ``scale_pad`` maps source pixels to its current pixels.
        imgsz: side of the square output.

    Returns:
        The letterboxed sample with every geometry moved and ``scale_pad`` composed, so it maps
        source pixels straight to the output. No instance is dropped (validation labels stay whole).
    """
    scale, new_h, new_w = fit_size(sample.height, sample.width, imgsz)
    resized = resize_long_side(sample.image, imgsz)
    pad_y, pad_x = (imgsz - new_h) // 2, (imgsz - new_w) // 2
    canvas = np.full((imgsz, imgsz, 3), PAD_VALUE, dtype=np.uint8)
    canvas[pad_y : pad_y + new_h, pad_x : pad_x + new_w] = resized
    matrix = np.array([[scale, 0.0, pad_x], [0.0, scale, pad_y]], dtype=np.float64)
    old_scale, old_px, old_py = sample.scale_pad
    moved = transform_geometry(sample, matrix, canvas)
    return replace(
        moved, scale_pad=(old_scale * scale, old_px * scale + pad_x, old_py * scale + pad_y)
    )


def unletterbox_points(points: Tensor, scale_pad: Tensor) -> Tensor:
    """Map network-input points back to source pixels.

    Args:
        points: (*B, N, 2) ``xy`` input pixels (extra trailing columns are not allowed).
        scale_pad: (*B, 3) ``(scale, pad_x, pad_y)`` from the batch.

    Returns:
        (*B, N, 2) ``xy`` source pixels, ``(input - pad) / scale``.
    """
    scale = scale_pad[..., None, 0:1]  # (*B, 1, 1)
    pad = scale_pad[..., None, 1:3]  # (*B, 1, 2)
    return (points - pad) / scale


def unletterbox_boxes(boxes: Tensor, scale_pad: Tensor) -> Tensor:
    """Map network-input ``xyxy`` boxes back to source pixels.

    Args:
        boxes: (*B, N, 4) ``xyxy`` input pixels.
        scale_pad: (*B, 3) ``(scale, pad_x, pad_y)`` from the batch.

    Returns:
        (*B, N, 4) ``xyxy`` source pixels.
    """
    corners = boxes.reshape(*boxes.shape[:-2], -1, 2)  # (*B, 2N, 2): x1y1, x2y2 per box
    return unletterbox_points(corners, scale_pad).reshape(boxes.shape)


def unletterbox_rboxes(rboxes: Tensor, scale_pad: Tensor) -> Tensor:
    """Map network-input rotated boxes back to source pixels (the angle is unchanged).

    Args:
        rboxes: (*B, N, 5) ``xywhr`` input pixels, radians.
        scale_pad: (*B, 3) ``(scale, pad_x, pad_y)`` from the batch.

    Returns:
        (*B, N, 5) ``xywhr`` source pixels.
    """
    centres = unletterbox_points(rboxes[..., 0:2], scale_pad)
    sizes = rboxes[..., 2:4] / scale_pad[..., None, 0:1]
    return torch.cat([centres, sizes, rboxes[..., 4:5]], dim=-1)


__all__ = [
    "fit_size",
    "letterbox",
    "resize_long_side",
    "unletterbox_boxes",
    "unletterbox_points",
    "unletterbox_rboxes",
]
