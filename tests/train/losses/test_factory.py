"""build_loss maps task names to loss classes."""

from __future__ import annotations

import pytest

from lucid_yolo.train.losses import (
    DetectionLoss,
    OBBLoss,
    PoseLoss,
    SegmentationLoss,
    build_loss,
)


@pytest.mark.parametrize(
    ("task", "cls"),
    [
        ("detect", DetectionLoss),
        ("segment", SegmentationLoss),
        ("pose", PoseLoss),
        ("obb", OBBLoss),
    ],
)
def test_build_loss_task_class(task: str, cls: type) -> None:
    loss = build_loss(task, 3)
    assert type(loss) is cls
    assert loss.num_classes == 3


def test_build_loss_forwards_options() -> None:
    loss = build_loss("pose", 1, num_keypoints=5, topk=4)
    assert isinstance(loss, PoseLoss)
    assert loss.num_keypoints == 5
    assert loss.assigners["o2m"].topk == 4


def test_build_loss_unknown_task_suggests_name() -> None:
    with pytest.raises(ValueError, match="unknown task 'segmnet': did you mean 'segment'"):
        build_loss("segmnet", 1)
