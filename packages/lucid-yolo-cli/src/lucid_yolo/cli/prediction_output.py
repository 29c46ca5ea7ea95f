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

from lucid_yolo.train.data.formats import rle_encode

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


def draw(
    image: npt.NDArray[np.uint8], predictions: dict[str, Tensor], names: tuple[str, ...]
) -> npt.NDArray[np.uint8]:
    """Draw one image's predictions on a copy of it.

    Args:
        image: (H, W, 3) uint8 BGR source image.
        predictions: as for :func:`detections`, source pixels.
        names: class names, index = class id.

    Returns:
        (H, W, 3) uint8 BGR: masks blended, boxes (or rotated boxes), keypoints and labels drawn.
    """
    canvas = image.copy()
    thickness = max(1, round(max(canvas.shape[:2]) / 400))
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
        label = f"{name} {float(predictions['scores'][i]):.2f}"
        cv2.putText(canvas, label, (x1, max(y1 - 3, 10)), cv2.FONT_HERSHEY_SIMPLEX, 0.4, colour, 1)
    return canvas


__all__ = ["KEYPOINT_MIN_VISIBILITY", "Detection", "colour_of", "detections", "draw", "record"]
