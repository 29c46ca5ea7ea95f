"""Keypoint geometry (COCO OKS) and polygon masks shared by the losses and the metrics.

Box geometry (``xyxy`` and ``xywhr``) lives in :mod:`lucid_yolo.models.geometry`, one home for
decoding, the assigners, the losses and the metrics.
"""

from lucid_yolo.train.geometry.keypoint_ops import (
    COCO_KEYPOINT_SIGMAS,
    keypoint_oks,
    keypoint_sigmas,
)
from lucid_yolo.train.geometry.polygon_masks import polygon_mask, polygon_masks

__all__ = [
    "COCO_KEYPOINT_SIGMAS",
    "keypoint_oks",
    "keypoint_sigmas",
    # polygons rasterised by the pixel-centre rule
    "polygon_mask",
    "polygon_masks",
]
