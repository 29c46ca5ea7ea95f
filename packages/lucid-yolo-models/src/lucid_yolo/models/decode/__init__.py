"""Decoding raw network outputs into detections.

Two paths: :func:`decode_end2end` (one-to-one branch, top-k, no IoU step; the deployed path)
and :func:`decode_nms` (one-to-many branch, class-wise NMS; rotated NMS for OBB).
"""

from lucid_yolo.models.decode.dense import (
    anchor_grid,
    decode_dense,
    decode_rboxes,
    distances_to_xywhr,
    xywhr_to_distances,
)
from lucid_yolo.models.decode.masks import (
    ResampleGrid,
    assemble_masks,
    box_region,
    mask_probabilities,
    resample_grid,
    resample_masks,
)
from lucid_yolo.models.decode.nms import decode_nms, greedy_keep, nms, rotated_nms
from lucid_yolo.models.decode.results import DensePredictions, Detections
from lucid_yolo.models.decode.topk import MAX_DETECTIONS, decode_end2end, topk_dense, topk_pairs

__all__ = [
    # results
    "DensePredictions",
    "Detections",
    # end-to-end path
    "MAX_DETECTIONS",
    "decode_end2end",
    "topk_dense",
    "topk_pairs",
    # NMS path
    "decode_nms",
    "greedy_keep",
    "nms",
    "rotated_nms",
    # dense decoding
    "anchor_grid",
    "decode_dense",
    "decode_rboxes",
    "distances_to_xywhr",
    "xywhr_to_distances",
    # masks
    "ResampleGrid",
    "assemble_masks",
    "box_region",
    "mask_probabilities",
    "resample_grid",
    "resample_masks",
]
