"""Batch records: images padded to one size, padding flagged, per-image masks kept apart."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from lucid_yolo.train.metrics import (
    BatchPredictions,
    BatchTargets,
    ImagePredictions,
    ImageTargets,
    MetricsInputError,
    flat_tensors,
    from_flat_tensors,
)


def _image(rows: int) -> ImagePredictions:
    return ImagePredictions(
        torch.linspace(0.9, 0.1, rows),
        torch.arange(rows),
        boxes=torch.rand(rows, 4),
        masks=torch.ones(rows, 3, 5, dtype=torch.bool),
    )


def test_batch_predictions_from_images_pad_and_flag_the_shorter_image() -> None:
    batch = BatchPredictions.from_images([_image(3), _image(1)])
    assert batch.boxes is not None
    assert batch.boxes.shape == (2, 3, 4)
    assert batch.valid.tolist() == [[True, True, True], [True, False, False]]
    assert batch.classes[1].tolist() == [0, 0, 0]


def test_batch_predictions_keep_each_image_masks_at_its_own_rows() -> None:
    batch = BatchPredictions.from_images([_image(3), _image(1)])
    assert batch.masks is not None
    masks, rows = batch.masks(1)
    assert masks.shape == (1, 3, 5)
    assert rows.tolist() == [0]
    assert batch.masks(0)[1].tolist() == [0, 1, 2]


def test_batch_predictions_reject_a_field_of_some_images_only() -> None:
    without_boxes = ImagePredictions(torch.tensor([0.5]), torch.tensor([0]))
    with pytest.raises(MetricsInputError, match="boxes is given for 1 of 2 images"):
        BatchPredictions.from_images([_image(1), without_boxes])


def test_batch_targets_image_gives_back_the_padded_rows() -> None:
    first = ImageTargets(
        torch.tensor([2, 1]), boxes=torch.rand(2, 4), iscrowd=torch.tensor([False, True])
    )
    second = ImageTargets(torch.tensor([0]), boxes=torch.rand(1, 4), iscrowd=torch.tensor([True]))
    batch = BatchTargets.from_images([first, second])
    image = batch.image(1)
    assert image.valid is not None
    assert image.iscrowd is not None
    assert image.classes.tolist() == [0, 0]
    assert image.valid.tolist() == [True, False]
    assert image.iscrowd.tolist() == [True, False]
    assert batch.ignore_flags().tolist() == [[False, True], [True, False]]


def test_batch_records_travel_as_flat_tensors_under_their_prefix() -> None:
    # a CUDA graph's region returns tensors only: the masks (a function) and the fields left
    # None are not among them, and each record takes back only the names under its prefix
    predictions = BatchPredictions.from_images([_image(3), _image(1)])
    targets = BatchTargets(
        classes=torch.tensor([[0, 1]]),
        valid=torch.tensor([[True, False]]),
        boxes=torch.rand(1, 2, 4),
        keypoints=torch.rand(1, 2, 17, 3),
        rboxes=torch.rand(1, 2, 5),
        iscrowd=torch.tensor([[False, True]]),
        difficult=torch.tensor([[True, False]]),
        areas=torch.rand(1, 2),
    )
    flat = {**flat_tensors(predictions, "p/"), **flat_tensors(targets, "t/")}
    assert sorted(k for k in flat if k.startswith("p/")) == [
        "p/boxes",
        "p/classes",
        "p/scores",
        "p/valid",
    ]
    back = from_flat_tensors(BatchPredictions, flat, "p/")
    again = from_flat_tensors(BatchTargets, flat, "t/")
    for record, original in ((back, predictions), (again, targets)):
        for field in fields(original):
            value = getattr(record, field.name)
            if field.name == "masks" or getattr(original, field.name) is None:
                assert value is None, field.name
            else:
                assert value is getattr(original, field.name), field.name
