"""Keypoint geometry (COCO OKS) shared by the pose loss and the keypoint metric.

Box geometry (``xyxy`` and ``xywhr``) lives in :mod:`lucid_yolo.models.geometry`, one home for
decoding, the assigners, the losses and the metrics.
"""

from lucid_yolo.train.geometry.keypoint_ops import (
    COCO_KEYPOINT_SIGMAS,
    keypoint_oks,
    keypoint_sigmas,
)

__all__ = [
    "COCO_KEYPOINT_SIGMAS",
    "keypoint_oks",
    "keypoint_sigmas",
]
