"""COCO-style evaluation: mAP50-95, mAP50 and a best-F1 P/R for boxes, masks, keypoints, OBB."""

from lucid_yolo.train.metrics.batch_instances import (
    BatchPredictions,
    BatchTargets,
    ImageMasks,
    flat_tensors,
    from_flat_tensors,
)
from lucid_yolo.train.metrics.coco_matching import (
    IOU_THRESHOLDS,
    ImageMatches,
    ImageOverlaps,
    match_batch,
    match_extent,
    match_images,
)
from lucid_yolo.train.metrics.distributed import gather_across_ranks
from lucid_yolo.train.metrics.image_instances import (
    ImagePredictions,
    ImageTargets,
    MetricsInputError,
)
from lucid_yolo.train.metrics.keypoint_similarity import (
    COCO_KEYPOINT_SIGMAS,
    keypoint_sigmas,
    keypoint_similarity,
)
from lucid_yolo.train.metrics.mean_average_precision import (
    DEFAULT_MAX_DETS,
    KINDS,
    MeanAveragePrecision,
)
from lucid_yolo.train.metrics.overlaps import box_overlaps, mask_overlaps
from lucid_yolo.train.metrics.precision_curves import (
    RECALL_THRESHOLDS,
    MatchedPredictions,
    best_f1_precision_recall,
    interpolated_precision,
    summarize_precision,
)
from lucid_yolo.train.metrics.rotated_overlap import (
    clip_convex,
    polygon_area,
    rotated_overlaps,
)
from lucid_yolo.train.metrics.scored_batch import ScoredBatch, ScoredKind

__all__ = [
    # the accumulator and its inputs
    "MeanAveragePrecision",
    "ImagePredictions",
    "ImageTargets",
    "BatchPredictions",
    "BatchTargets",
    "ImageMasks",
    "flat_tensors",
    "from_flat_tensors",
    "MetricsInputError",
    "ScoredBatch",
    "ScoredKind",
    "KINDS",
    "DEFAULT_MAX_DETS",
    # distributed evaluation
    "gather_across_ranks",
    # device results read on the host without waiting for the queue
    # overlaps
    "box_overlaps",
    "mask_overlaps",
    "keypoint_similarity",
    "keypoint_sigmas",
    "COCO_KEYPOINT_SIGMAS",
    "rotated_overlaps",
    "clip_convex",
    "polygon_area",
    # COCO matching and accumulation
    "IOU_THRESHOLDS",
    "ImageOverlaps",
    "ImageMatches",
    "match_batch",
    "match_extent",
    "match_images",
    "RECALL_THRESHOLDS",
    "MatchedPredictions",
    "interpolated_precision",
    "summarize_precision",
    "best_f1_precision_recall",
]
