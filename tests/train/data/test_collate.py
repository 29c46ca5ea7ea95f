"""collate: Batch shapes and dtypes per task."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rbox_corners import corner_array

from lucid_yolo.train.data.augment import Sample, to_targets
from lucid_yolo.train.data.collate import collate
from lucid_yolo.train.data.dataset_yaml import Task

N, S, K = 5, 32, 3


def _sample(n: int) -> Sample:
    boxes = np.tile(np.array([[2, 2, 20, 12]], dtype=np.float32), (n, 1))
    return Sample(
        image=np.zeros((S, S, 3), dtype=np.uint8),
        classes=np.zeros(n, dtype=np.int64),
        boxes=boxes,
        polygons=[np.array([[2, 2], [20, 2], [20, 12]], dtype=np.float32)] * n,
        keypoints=np.ones((n, K, 3), dtype=np.float32),
        corners=corner_array(np.tile(np.array([[11, 7, 18, 10, 0]], dtype=np.float32), (n, 1))),
        orig_size=(64, 64),
        scale_pad=(0.5, 0.0, 0.0),
    )


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_collate_shapes_and_dtypes(task: Task) -> None:
    batch = collate([to_targets(_sample(n), task, N, K) for n in (0, 2)])
    assert batch["images"].shape == (2, 3, S, S)
    assert batch["images"].dtype == torch.uint8
    assert batch["classes"].shape == (2, N)
    assert batch["classes"].dtype == torch.int64
    assert batch["valid"].dtype == torch.bool
    assert batch["valid"].sum(1).tolist() == [0, 2]
    assert batch["boxes"].shape == (2, N, 4)
    assert batch["boxes"].dtype == torch.float32
    assert batch["ignore"].shape == (2, N)
    assert batch["ignore"].dtype == torch.bool
    assert batch["image_ids"].dtype == torch.int64
    assert batch["orig_sizes"].tolist() == [[64, 64], [64, 64]]
    assert batch["scale_pad"].dtype == torch.float32
    expected = {"segment": "masks", "pose": "keypoints", "obb": "rboxes"}
    for key in ("masks", "keypoints", "rboxes"):
        assert (key in batch) == (expected.get(task) == key)
    if task == "segment":
        assert batch["masks"].shape == (2, N, S // 4, S // 4)
        assert batch["masks"].dtype == torch.uint8
    if task == "pose":
        assert batch["keypoints"].shape == (2, N, K, 3)
        assert batch["keypoints"].dtype == torch.float32
    if task == "obb":
        assert batch["rboxes"].shape == (2, N, 5)
        assert batch["rboxes"].dtype == torch.float32


def test_collate_rejects_empty_batch() -> None:
    with pytest.raises(ValueError, match="empty batch"):
        collate([])


def test_collate_keeps_source_shapes_per_image() -> None:
    items = [to_targets(_sample(n), "segment", N, K) for n in (1, 2)]
    for item in items:
        item.source_shapes = [np.zeros((3, 2))] * int(item.valid.sum())
    batch = collate(items)
    assert [len(polygons) for polygons in batch["source_shapes"]] == [1, 2]
    assert "source_shapes" not in collate([to_targets(_sample(1), "segment", N, K)])
