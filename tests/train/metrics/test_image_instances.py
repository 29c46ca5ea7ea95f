"""The per-image records: ignore flags and field checks."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.train.metrics import ImagePredictions, ImageTargets, MetricsInputError
from lucid_yolo.train.metrics.image_instances import require_fields


def test_image_targets_ignore_flags_join_crowd_and_difficult() -> None:
    targets = ImageTargets(
        torch.tensor([0, 0, 0]),
        iscrowd=torch.tensor([True, False, False]),
        difficult=torch.tensor([0, 1, 0]),
    )
    assert targets.crowd_flags().tolist() == [True, False, False]
    assert targets.ignore_flags().tolist() == [True, True, False]


def test_image_targets_without_flags_ignore_nothing() -> None:
    assert ImageTargets(torch.tensor([3, 1])).ignore_flags().tolist() == [False, False]


def test_require_fields_returns_fields_in_order() -> None:
    preds = ImagePredictions(torch.tensor([0.5]), torch.tensor([2]), boxes=torch.zeros(1, 4))
    scores, boxes = require_fields(preds, ("scores", "boxes"), "box")
    assert scores is preds.scores
    assert boxes is preds.boxes


def test_require_fields_rejects_non_tensors() -> None:
    preds = ImagePredictions(torch.tensor([0.5]), torch.tensor([2]), boxes=[[0, 0, 1, 1]])  # type: ignore[arg-type]
    with pytest.raises(
        MetricsInputError, match=r"ImagePredictions.boxes must be a torch.Tensor, got 'list'"
    ):
        require_fields(preds, ("boxes",), "box")


def test_require_fields_rejects_a_row_count_mismatch() -> None:
    preds = ImagePredictions(torch.tensor([0.5, 0.4]), torch.tensor([2]))
    with pytest.raises(
        MetricsInputError, match=r"ImagePredictions.classes has shape \(1,\) but the record has 2"
    ):
        require_fields(preds, ("classes",), "box")
