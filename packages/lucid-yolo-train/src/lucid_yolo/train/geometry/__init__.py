"""Keypoint geometry (COCO OKS), polygon and run-length masks shared by data, losses and metrics.

Box geometry (``xyxy`` and ``xywhr``) lives in :mod:`lucid_yolo.models.geometry`, one home for
decoding, the assigners, the losses and the metrics.
"""

from lucid_yolo.train.geometry.keypoint_ops import (
    COCO_KEYPOINT_SIGMAS,
    keypoint_oks,
    keypoint_sigmas,
)
from lucid_yolo.train.geometry.polygon_masks import polygon_mask
from lucid_yolo.train.geometry.run_length import (
    RleError,
    RunLengthMask,
    counts_from_string,
    counts_to_string,
    rle_decode,
    rle_encode,
)
from lucid_yolo.train.geometry.source_masks import SourceShape, source_masks

__all__ = [
    "COCO_KEYPOINT_SIGMAS",
    "keypoint_oks",
    "keypoint_sigmas",
    # polygons rasterised by the pixel-centre rule
    "polygon_mask",
    # COCO run-length encoded masks
    "RleError",
    "RunLengthMask",
    "counts_from_string",
    "counts_to_string",
    "rle_decode",
    "rle_encode",
    # ground truth at the source size, polygon or RLE
    "SourceShape",
    "source_masks",
]
