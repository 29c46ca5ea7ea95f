"""A scored batch travels as a flat mapping of tensors (a region's output) and back."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.train.metrics import (
    BatchPredictions,
    BatchTargets,
    MeanAveragePrecision,
    MetricsInputError,
    ScoredBatch,
)


def _scored() -> ScoredBatch:
    g = torch.Generator().manual_seed(0)
    boxes = torch.rand(2, 5, 4, generator=g) * 10
    boxes[..., 2:] += boxes[..., :2] + 1
    predictions = BatchPredictions(
        scores=torch.rand(2, 5, generator=g),
        classes=torch.randint(0, 3, (2, 5), generator=g),
        valid=torch.rand(2, 5, generator=g) < 0.8,
        boxes=boxes,
    )
    targets = BatchTargets(
        classes=torch.randint(0, 3, (2, 3), generator=g),
        valid=torch.tensor([[True, True, False], [True, False, False]]),
        boxes=boxes[:, :3],
    )
    return MeanAveragePrecision(kinds=("box",)).score_batch(predictions, targets)


def test_scored_batch_round_trips_through_its_tensors() -> None:
    scored = _scored()
    flat = scored.as_tensors()
    assert sorted(flat) == sorted(
        ["lowest_classes"]
        + [
            f"box/{name}"
            for name in (
                "overlaps",
                "ignore",
                "reusable",
                "scores",
                "classes",
                "kept",
                "target_classes",
                "counted",
                "extent",
            )
        ]
    )
    back = ScoredBatch.from_tensors(flat)
    assert list(back.kinds) == ["box"]
    assert back.lowest_classes is scored.lowest_classes
    for name, tensor in back.as_tensors().items():
        assert tensor is flat[name], name


def test_scored_batch_from_tensors_names_what_is_wrong() -> None:
    flat = _scored().as_tensors()
    with pytest.raises(MetricsInputError, match="'box/weights' is not '<kind>/<field>'"):
        ScoredBatch.from_tensors({**flat, "box/weights": flat["box/scores"]})
    without_extent = {k: v for k, v in flat.items() if k != "box/extent"}
    with pytest.raises(MetricsInputError, match="lacks \\{'box': \\['extent'\\]\\}"):
        ScoredBatch.from_tensors(without_extent)
    without_lowest = {k: v for k, v in flat.items() if k != "lowest_classes"}
    with pytest.raises(MetricsInputError, match="lacks 'lowest_classes'"):
        ScoredBatch.from_tensors(without_lowest)
