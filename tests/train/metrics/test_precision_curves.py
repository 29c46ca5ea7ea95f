"""COCO interpolated precision and the best-F1 P/R summary on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from lucid_yolo.train.metrics import (
    MatchedPredictions,
    best_f1_precision_recall,
    interpolated_precision,
    summarize_precision,
)


def _data(
    scores: list[float],
    classes: list[int],
    tp: list[bool],
    counts: list[int],
    ignored: list[bool] | None = None,
) -> MatchedPredictions:
    n = len(scores)
    return MatchedPredictions(
        scores=np.array(scores, dtype=np.float64),
        classes=np.array(classes, dtype=np.int64),
        matched=np.array([tp], dtype=bool).reshape(1, n),
        ignored=np.array([ignored or [False] * n], dtype=bool).reshape(1, n),
        target_counts=np.array(counts, dtype=np.int64),
    )


def test_interpolated_precision_hand_curve() -> None:
    # TP, FP, TP over 2 targets: recall 0.5 at precision 1, recall 1 at precision 2/3
    precision = interpolated_precision(_data([0.9, 0.8, 0.7], [0, 0, 0], [True, False, True], [2]))
    curve = precision[0, :, 0]
    assert curve[:51] == pytest.approx(1.0)
    assert curve[51:] == pytest.approx(2 / 3)
    ap = (51 * 1.0 + 50 * 2 / 3) / 101
    assert summarize_precision(precision) == (pytest.approx(ap), pytest.approx(ap))


def test_interpolated_precision_is_zero_beyond_the_last_recall() -> None:
    precision = interpolated_precision(_data([0.9], [0], [True], [4]))
    assert precision[0, :26, 0] == pytest.approx(1.0)
    assert precision[0, 26:, 0].tolist() == [0.0] * 75


def test_interpolated_precision_class_without_targets_is_left_out() -> None:
    precision = interpolated_precision(_data([0.9, 0.8], [0, 1], [True, False], [1, 0]))
    assert precision[0, :, 1].tolist() == [-1.0] * 101
    assert summarize_precision(precision)[0] == pytest.approx(1.0)


def test_interpolated_precision_class_without_predictions_counts_as_zero() -> None:
    precision = interpolated_precision(_data([0.9], [0], [True], [1, 3]))
    assert summarize_precision(precision)[0] == pytest.approx(0.5)


def test_interpolated_precision_ignored_predictions_are_neither_tp_nor_fp() -> None:
    with_ignored = _data([0.9, 0.8, 0.7], [0, 0, 0], [True, True, True], [2], [False, True, False])
    without = _data([0.9, 0.7], [0, 0], [True, True], [2])
    assert np.array_equal(interpolated_precision(with_ignored), interpolated_precision(without))


def test_summarize_precision_without_targets_is_zero() -> None:
    assert summarize_precision(interpolated_precision(_data([0.9], [0], [False], [0]))) == (
        0.0,
        0.0,
    )


def test_best_f1_precision_recall_picks_the_best_threshold() -> None:
    # class 0: TP .9, FP .8, FP .7, TP .6 over 2 targets; best F1 = 2/3 at .9 (P 1, R .5)
    # (at .6: P .5, R 1, F1 2/3 too: the tie goes to the lower threshold, higher recall)
    data = _data([0.9, 0.8, 0.7, 0.6], [0, 0, 0, 0], [True, False, False, True], [2])
    assert best_f1_precision_recall(data) == (pytest.approx(0.5), pytest.approx(1.0))


def test_best_f1_precision_recall_averages_over_classes() -> None:
    data = _data([0.9, 0.5, 0.4], [0, 1, 1], [True, True, False], [1, 2])
    # at .5: class 0 P 1 R 1, class 1 P 1 R .5 → mean F1 (1 + 2/3)/2; at .4 class 1 gets worse
    assert best_f1_precision_recall(data) == (pytest.approx(1.0), pytest.approx(0.75))


def test_best_f1_precision_recall_without_true_positives_is_zero() -> None:
    assert best_f1_precision_recall(_data([0.9], [0], [False], [1])) == (0.0, 0.0)
