"""What ``lucid-yolo predict`` writes: a JSON record per image and an optional PNG overlay.

A record lists the detections best first, in pixels of the source image:

==============  ===========================================================================
key             value
==============  ===========================================================================
``class_id``    int, index into the checkpoint's class names
``class_name``  str
``score``       float in ``[0, 1]``
``box``         ``[x1, y1, x2, y2]`` source pixels (OBB: the rotated box's axis-aligned hull)
``mask``        segment: COCO RLE ``{"size": [H, W], "counts": str}`` at source resolution
``keypoints``   pose: ``[[x, y, visibility], ...]``, source pixels, visibility a probability
``rbox``        obb: ``[cx, cy, w, h, angle]`` source pixels, radians, long-edge convention
==============  ===========================================================================
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
from torch import Tensor

from lucid_yolo.train.geometry import rle_encode

Detection = dict[str, Any]


def colour_of(class_id: int) -> tuple[int, int, int]:
    """A BGR colour per class: hues spaced by the golden angle, so neighbouring ids differ."""
    hue = np.uint8(round((class_id * 0.618034 % 1.0) * 179))
    hsv = np.array([[[hue, 200, 255]]], dtype=np.uint8)
    b, g, r = (int(v) for v in cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[0, 0])
    return b, g, r


KEYPOINT_MIN_VISIBILITY = 0.5
"""Keypoints drawn when their visibility probability reaches this."""


def _round(values: Tensor) -> list[Any]:
    """Nested lists of floats rounded to 3 decimals (sub-pixel noise is not information)."""
    array = np.round(values.detach().cpu().double().numpy(), 3)
    result: list[Any] = array.tolist()
    return result


def detections(predictions: dict[str, Tensor], names: tuple[str, ...]) -> list[Detection]:
    """Turn one image's predictions into JSON-ready detections.

    Args:
        predictions: CPU tensors from :meth:`Evaluator.predictions`: ``boxes`` (N, 4) ``xyxy``,
            ``scores`` (N,), ``classes`` (N,), and per task ``masks`` (N, H, W) bool,
            ``keypoints`` (N, K, 3), ``rboxes`` (N, 5) ``xywhr``; all in source pixels.
        names: class names, index = class id.

    Returns:
        One dict per detection (keys in the module docstring), best first.
    """
    result: list[Detection] = []
    for i in range(int(predictions["scores"].shape[0])):
        class_id = int(predictions["classes"][i])
        entry: Detection = {
            "class_id": class_id,
            "class_name": names[class_id] if 0 <= class_id < len(names) else str(class_id),
            "score": round(float(predictions["scores"][i]), 5),
            "box": _round(predictions["boxes"][i]),
        }
        if "masks" in predictions:
            entry["mask"] = rle_encode(predictions["masks"][i].numpy())
        if "keypoints" in predictions:
            entry["keypoints"] = _round(predictions["keypoints"][i])
        if "rboxes" in predictions:
            entry["rbox"] = _round(predictions["rboxes"][i])
        result.append(entry)
    return result


def record(image: Path, size: tuple[int, int], found: list[Detection]) -> dict[str, Any]:
    """The JSON document of one image: its path, ``(height, width)`` and detections."""
    return {"image": str(image), "height": size[0], "width": size[1], "detections": found}


LABEL_FONT = cv2.FONT_HERSHEY_SIMPLEX


def label_box(
    text_size: tuple[int, int],
    anchor: tuple[int, int],
    image_size: tuple[int, int],
    taken: list[tuple[int, int, int, int]],
) -> tuple[int, int, int, int]:
    """Where a label goes: above its box's top-left corner, inside the image, clear of others.

    Args:
        text_size: ``(width, height)`` of the label, padding included.
        anchor: ``(x1, y1)`` of the detection's box.
        image_size: ``(height, width)`` of the image.
        taken: labels already placed, ``(x1, y1, x2, y2)``.

    Returns:
        ``(x1, y1, x2, y2)`` of the label: above the box when there is room, else just inside its
        top; shifted left to stay in the image; moved down below any label it would cover.
    """
    width, height = text_size
    image_h, image_w = image_size
    x1 = min(max(anchor[0], 0), max(image_w - width, 0))
    y1 = anchor[1] - height if anchor[1] - height >= 0 else max(anchor[1], 0)
    moved = True
    while moved:
        moved = False
        for ox1, oy1, ox2, oy2 in taken:
            if x1 < ox2 and ox1 < x1 + width and y1 < oy2 and oy1 < y1 + height:
                y1, moved = oy2, True
    y1 = min(y1, max(image_h - height, 0))
    return x1, y1, x1 + width, y1 + height


def draw(
    image: npt.NDArray[np.uint8], predictions: dict[str, Tensor], names: tuple[str, ...]
) -> npt.NDArray[np.uint8]:
    """Draw one image's predictions on a copy of it.

    Args:
        image: (H, W, 3) uint8 BGR source image.
        predictions: as for :func:`detections`, source pixels.
        names: class names, index = class id.

    Returns:
        (H, W, 3) uint8 BGR: masks blended, boxes (or rotated boxes) and keypoints drawn, then
        one label per detection (name and score, dark text on the class colour) inside the image,
        best detections' labels placed first.
    """
    canvas = image.copy()
    image_size = (canvas.shape[0], canvas.shape[1])
    thickness = max(1, round(max(image_size) / 400))
    font_scale = max(0.35, max(image_size) / 1600)
    labels: list[tuple[str, tuple[int, int], tuple[int, int, int]]] = []
    for i in range(int(predictions["scores"].shape[0])):
        class_id = int(predictions["classes"][i])
        colour = colour_of(class_id)
        if "masks" in predictions:
            inside = predictions["masks"][i].numpy()
            blended = 0.5 * canvas[inside] + 0.5 * np.array(colour, dtype=np.float64)
            canvas[inside] = blended.astype(np.uint8)
        x1, y1, x2, y2 = (round(float(v)) for v in predictions["boxes"][i])
        if "rboxes" in predictions:
            cx, cy, w, h, angle = (float(v) for v in predictions["rboxes"][i])
            corners = cv2.boxPoints(((cx, cy), (w, h), math.degrees(angle)))
            cv2.polylines(canvas, [np.round(corners).astype(np.int32)], True, colour, thickness)
        else:
            cv2.rectangle(canvas, (x1, y1), (x2, y2), colour, thickness)
        if "keypoints" in predictions:
            for x, y, visible in predictions["keypoints"][i].tolist():
                if visible >= KEYPOINT_MIN_VISIBILITY:
                    cv2.circle(canvas, (round(x), round(y)), thickness + 1, colour, -1)
        name = names[class_id] if 0 <= class_id < len(names) else str(class_id)
        labels.append((f"{name} {float(predictions['scores'][i]):.2f}", (x1, y1), colour))
    taken: list[tuple[int, int, int, int]] = []
    for text, anchor, colour in labels:
        (text_w, text_h), baseline = cv2.getTextSize(text, LABEL_FONT, font_scale, 1)
        box = label_box((text_w + 2, text_h + baseline + 2), anchor, image_size, taken)
        taken.append(box)
        cv2.rectangle(canvas, box[:2], (box[2] - 1, box[3] - 1), colour, -1)
        origin = (box[0] + 1, box[3] - baseline - 1)
        cv2.putText(canvas, text, origin, LABEL_FONT, font_scale, (0, 0, 0), 1, cv2.LINE_AA)
    return canvas


__all__ = [
    "KEYPOINT_MIN_VISIBILITY",
    "LABEL_FONT",
    "Detection",
    "colour_of",
    "detections",
    "draw",
    "label_box",
    "record",
]
