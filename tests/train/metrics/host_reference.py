"""The metric's previous host path, kept as the reference the device path must equal bitwise.

Until issue 11 the accumulator cut each image's predictions with NumPy, moved every overlap
matrix to the host, matched one prediction rank at a time and kept NumPy records. This module
keeps that path, written plainly, for boxes: the device path (sorting, ``max_dets``, overlaps,
matching in rounds, records padded on the device) must give the same ``MatchedPredictions`` and
so the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from lucid_yolo.train.metrics import (
    IOU_THRESHOLDS,
    ImageOverlaps,
    ImagePredictions,
    ImageTargets,
    MatchedPredictions,
    best_f1_precision_recall,
    box_overlaps,
    interpolated_precision,
    summarize_precision,
)


def rank_by_rank(image: ImageOverlaps) -> tuple[np.ndarray, np.ndarray]:
    """Greedy matching, one vectorised step per prediction rank (the previous implementation)."""
    thresholds = np.minimum(IOU_THRESHOLDS, 1 - 1e-10)[:, None]  # (T, 1)
    D, G = image.overlaps.shape
    matched = np.zeros((thresholds.shape[0], D), dtype=bool)
    ignored = np.zeros_like(matched)
    taken = np.zeros((thresholds.shape[0], G), dtype=bool)
    for d in range(D if G else 0):
        candidate = (~taken | image.reusable) & (image.overlaps[d] >= thresholds)  # (T, G)
        hit = np.zeros(thresholds.shape[0], dtype=bool)
        target = np.zeros(thresholds.shape[0], dtype=np.int64)
        for allowed in (candidate & ~image.ignore, candidate & image.ignore):
            values = np.where(allowed, image.overlaps[d], -np.inf)[:, ::-1]
            best = G - 1 - np.argmax(values, axis=1)
            first = ~hit & allowed.any(axis=1)
            target = np.where(first, best, target)
            hit |= first
        matched[:, d] = hit
        ignored[:, d] = hit & image.ignore[target]
        taken[np.flatnonzero(hit), target[hit]] = True
    return matched, ignored


def top_per_class(scores: np.ndarray, classes: np.ndarray, max_dets: int) -> np.ndarray:
    """Indices of each class's ``max_dets`` best predictions, by descending score (stable)."""
    by_score = np.argsort(-scores, kind="stable")
    kept = []
    seen: dict[int, int] = {}
    for index in by_score.tolist():
        c = int(classes[index])
        seen[c] = seen.get(c, 0) + 1
        if seen[c] <= max_dets:
            kept.append(index)
    return np.asarray(kept, dtype=np.int64)


def host_box_records(
    predictions: Sequence[ImagePredictions],
    targets: Sequence[ImageTargets],
    max_dets: int,
    image_ids: Sequence[int] | None = None,
) -> MatchedPredictions:
    """Box records of every image, the previous way: real rows cut on the host first."""
    T = IOU_THRESHOLDS.shape[0]
    rows = []
    for pred, target in zip(predictions, targets, strict=True):
        p_valid, t_valid = pred.valid_flags(), target.valid_flags()
        scores = pred.scores[p_valid].to(torch.float64).numpy()
        classes = pred.classes[p_valid].numpy().astype(np.int64)
        assert pred.boxes is not None
        assert target.boxes is not None
        t_classes = target.classes[t_valid].numpy().astype(np.int64)
        crowd = target.crowd_flags()[t_valid]
        keep = top_per_class(scores, classes, max_dets)
        same_class = classes[keep][:, None] == t_classes[None, :]
        overlaps = box_overlaps(pred.boxes[p_valid][keep], target.boxes[t_valid], crowd).numpy()
        ignore = target.ignore_flags()[t_valid].numpy()
        image = ImageOverlaps(np.where(same_class, overlaps, -1.0), ignore, ignore)
        matched, ignored = rank_by_rank(image)
        rows.append((scores[keep], classes[keep], matched, ignored, t_classes[~ignore]))
    if image_ids is None:
        order = np.arange(len(rows))
    else:
        _, order = np.unique(np.asarray(image_ids), return_index=True)
    picked = [rows[i] for i in order]
    counted = np.concatenate([np.zeros(0, dtype=np.int64), *(r[4] for r in picked)])
    classes = np.concatenate([np.zeros(0, dtype=np.int64), *(r[1] for r in picked)])
    counts = np.bincount(counted)
    num_classes = max(counts.shape[0], int(classes.max(initial=-1)) + 1)
    return MatchedPredictions(
        scores=np.concatenate([np.zeros(0), *(r[0] for r in picked)]),
        classes=classes,
        matched=np.concatenate([np.zeros((T, 0), dtype=bool), *(r[2] for r in picked)], axis=1),
        ignored=np.concatenate([np.zeros((T, 0), dtype=bool), *(r[3] for r in picked)], axis=1),
        target_counts=np.pad(counts, (0, num_classes - counts.shape[0])),
    )


def summary(data: MatchedPredictions) -> dict[str, float]:
    """What ``MeanAveragePrecision.compute`` reports for ``box``, from host records."""
    map50_95, map50 = summarize_precision(interpolated_precision(data))
    precision, recall = best_f1_precision_recall(data)
    return {
        "box/mAP50-95": map50_95,
        "box/mAP50": map50,
        "box/P": precision,
        "box/R": recall,
    }
