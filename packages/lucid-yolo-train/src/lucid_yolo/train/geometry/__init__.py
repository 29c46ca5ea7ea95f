"""Box and keypoint geometry shared by the assigners, the losses and the metrics."""

from lucid_yolo.train.geometry.box_ops import box_area, box_ciou, box_iou
from lucid_yolo.train.geometry.keypoint_ops import (
    COCO_KEYPOINT_SIGMAS,
    keypoint_oks,
    keypoint_sigmas,
)
from lucid_yolo.train.geometry.rbox_ops import (
    normalize_xywhr,
    points_in_xywhr,
    probiou,
    rbox_covariance,
    xywhr_to_corners,
)

__all__ = [
    # axis-aligned boxes (xyxy)
    "box_area",
    "box_ciou",
    "box_iou",
    # rotated boxes (xywhr, long-edge convention)
    "normalize_xywhr",
    "points_in_xywhr",
    "probiou",
    "rbox_covariance",
    "xywhr_to_corners",
    # keypoints (COCO OKS)
    "COCO_KEYPOINT_SIGMAS",
    "keypoint_oks",
    "keypoint_sigmas",
]
