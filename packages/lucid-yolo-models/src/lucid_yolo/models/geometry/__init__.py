"""Box geometry, one pure function per concept, named by box format.

Decoding, NMS, the assigners, the losses and the metrics all import from here, so an overlap or
a corner order has exactly one definition. ``xyxy`` is corners (x1, y1, x2, y2); ``xywhr`` is
centre, size and angle in the long-edge convention (:mod:`lucid_yolo.models.geometry.xywhr`).
"""

from lucid_yolo.models.geometry.xywhr import (
    normalize_xywhr,
    points_in_xywhr,
    probiou,
    xywhr_covariance,
    xywhr_to_corners,
    xywhr_to_xyxy,
)
from lucid_yolo.models.geometry.xyxy import box_area, box_ciou, box_iou

__all__ = [
    # axis-aligned boxes (xyxy)
    "box_area",
    "box_ciou",
    "box_iou",
    # rotated boxes (xywhr, long-edge convention)
    "normalize_xywhr",
    "points_in_xywhr",
    "probiou",
    "xywhr_covariance",
    "xywhr_to_corners",
    "xywhr_to_xyxy",
]
