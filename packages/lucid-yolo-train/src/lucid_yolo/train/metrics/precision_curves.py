"""From matched predictions to COCO's interpolated precision, AP, and a best-F1 P/R summary.

COCO's accumulation (``accumulate``), per class and threshold: all predictions of the class over
the whole set, ordered by descending score with a stable sort over (image order, in-image score
order); running sums of true positives (matched, not ignored) and false positives (unmatched, not
ignored) give recall ``tp / n_gt`` and precision ``tp / (tp + fp + eps)``; precision is made
non-increasing from the right (the upper envelope); at each of the 101 recall thresholds
0.00:0.01:1.00 the precision of the first point whose recall reaches it is read off (0 beyond the
last). AP is the mean of those 101 values; mAP the mean over thresholds and over classes that have
at least one counted target (a class without one has no AP and is left out, as COCO's -1 entries
are).

The P/R summary is not part of COCO: it is the precision and recall, averaged over classes, at the
one confidence threshold that maximises the mean per-class F1 at the first (0.50) IoU threshold,
computed from the raw counts (no interpolation). Lowering the threshold past a false positive
never raises any class's F1, so only scores of true positives are candidates; on ties the lowest
threshold (highest recall) wins.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

RECALL_THRESHOLDS: FloatArray = np.linspace(0.0, 1.0, 101)
"""The 101 COCO recall thresholds 0.00:0.01:1.00."""

_EPS = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class MatchedPredictions:
    """Every kept prediction of the evaluated set, in COCO's concatenation order.

    Attributes:
        scores: (N,) float64 confidence.
        classes: (N,) int64 class id in ``[0, C)``.
        matched: (T, N) bool, matched a target at IoU threshold ``t``.
        ignored: (T, N) bool, matched an ignored target at threshold ``t`` (neither TP nor FP).
        target_counts: (C,) int64 counted (not ignored) targets per class.
    """

    scores: FloatArray
    classes: IntArray
    matched: BoolArray
    ignored: BoolArray
    target_counts: IntArray


def interpolated_precision(data: MatchedPredictions) -> FloatArray:
    """COCO's 101-point interpolated precision.

    Args:
        data: matched predictions of the whole set.

    Returns:
        (T, R, C) float64 precision at each IoU threshold, recall threshold and class; -1 for
        classes without a counted target.
    """
    T, C, R = data.matched.shape[0], data.target_counts.shape[0], RECALL_THRESHOLDS.shape[0]
    precision = np.full((T, R, C), -1.0)
    for c, order in enumerate(_class_orders(data)):
        n_gt = int(data.target_counts[c])
        if n_gt == 0:
            continue
        precision[:, :, c] = 0.0
        if order.shape[0] == 0:
            continue
        tp, fp = _running_counts(data, order)  # (T, n_c) each
        recall = tp / n_gt
        envelope = np.maximum.accumulate((tp / (tp + fp + _EPS))[:, ::-1], axis=1)[:, ::-1]
        for t in range(T):
            index = np.searchsorted(recall[t], RECALL_THRESHOLDS, side="left")
            reached = index < order.shape[0]
            precision[t, reached, c] = envelope[t, index[reached]]
    return precision


def summarize_precision(precision: FloatArray) -> tuple[float, float]:
    """mAP over thresholds 0.50:0.95 and mAP at 0.50 from (T, R, C) interpolated precision.

    Returns:
        ``(map50_95, map50)``; 0.0 when no class has a counted target (COCO would print -1).
    """
    valid = precision > -1
    if not valid.any():
        return 0.0, 0.0
    first = precision[0]
    return float(precision[valid].mean()), float(first[first > -1].mean())


def best_f1_precision_recall(data: MatchedPredictions) -> tuple[float, float]:
    """Class-mean precision and recall at the confidence that maximises the mean F1 (IoU 0.50).

    Returns:
        ``(precision, recall)``; ``(0.0, 0.0)`` without any true positive.
    """
    counted = data.target_counts > 0
    tp_all = data.matched[0] & ~data.ignored[0]
    if not counted.any() or not tp_all.any():
        return 0.0, 0.0
    candidates = np.unique(data.scores[tp_all])  # ascending
    C, U = data.target_counts.shape[0], candidates.shape[0]
    precision = np.zeros((C, U))
    recall = np.zeros((C, U))
    for c, order in enumerate(_class_orders(data)):
        if not counted[c] or order.shape[0] == 0:
            continue
        tp, fp = _running_counts(data, order, rows=slice(0, 1))
        above = np.searchsorted(-data.scores[order], -candidates, side="right")  # preds >= each
        tp_at = np.where(above > 0, tp[0, above - 1], 0.0)
        fp_at = np.where(above > 0, fp[0, above - 1], 0.0)
        total = tp_at + fp_at
        precision[c] = np.where(total > 0, tp_at / np.where(total > 0, total, 1.0), 0.0)
        recall[c] = tp_at / data.target_counts[c]
    p, r = precision[counted], recall[counted]
    f1 = np.where(p + r > 0, 2 * p * r / np.where(p + r > 0, p + r, 1.0), 0.0).mean(axis=0)
    best = int(np.argmax(f1))  # candidates ascend, so the first maximum is the lowest threshold
    return float(p[:, best].mean()), float(r[:, best].mean())


def _class_orders(data: MatchedPredictions) -> list[IntArray]:
    """Per class, prediction indices by descending score (stable over the concatenation order)."""
    by_score = np.argsort(-data.scores, kind="stable")
    by_class = by_score[np.argsort(data.classes[by_score], kind="stable")]
    bounds = np.searchsorted(data.classes[by_class], np.arange(data.target_counts.shape[0] + 1))
    return [by_class[bounds[c] : bounds[c + 1]] for c in range(data.target_counts.shape[0])]


def _running_counts(
    data: MatchedPredictions, order: IntArray, rows: slice = slice(None)
) -> tuple[FloatArray, FloatArray]:
    """Cumulative (T, n) true- and false-positive counts along ``order`` (ignored: neither)."""
    matched = data.matched[rows][:, order]
    counted = ~data.ignored[rows][:, order]
    tp = np.cumsum(matched & counted, axis=1, dtype=np.float64)
    fp = np.cumsum(~matched & counted, axis=1, dtype=np.float64)
    return tp, fp


__all__ = [
    "RECALL_THRESHOLDS",
    "MatchedPredictions",
    "best_f1_precision_recall",
    "interpolated_precision",
    "summarize_precision",
]
