"""OKS against the COCO definition on hand cases; the sigma rule for other keypoint counts."""

from __future__ import annotations

import math

import pytest
import torch

from lucid_yolo.train.metrics import COCO_KEYPOINT_SIGMAS, keypoint_sigmas, keypoint_similarity

BOX = torch.tensor([[0.0, 0.0, 10.0, 10.0]])
AREA = torch.tensor([100.0])


def test_keypoint_similarity_identical_keypoints_are_one() -> None:
    kpts = torch.tensor([[[1.0, 2.0, 2.0], [3.0, 4.0, 1.0]]])
    out = keypoint_similarity(kpts, kpts, BOX, AREA, torch.tensor([0.05, 0.07]))
    assert out.item() == pytest.approx(1.0)


def test_keypoint_similarity_follows_the_coco_formula() -> None:
    target = torch.tensor([[[0.0, 0.0, 2.0], [5.0, 5.0, 2.0]]])
    pred = torch.tensor([[[3.0, 4.0, 0.9], [5.0, 5.0, 0.9]]])  # 5 px off, then exact
    sigmas = torch.tensor([0.1, 0.1], dtype=torch.float64)
    expected = (math.exp(-25 / (2 * 100 * (2 * 0.1) ** 2)) + 1.0) / 2
    out = keypoint_similarity(pred, target, BOX, AREA, sigmas)
    assert out.item() == pytest.approx(expected, rel=1e-12)


def test_keypoint_similarity_skips_unlabelled_keypoints() -> None:
    target = torch.tensor([[[5.0, 5.0, 2.0], [0.0, 0.0, 0.0]]])
    pred = torch.tensor([[[5.0, 5.0, 1.0], [90.0, 90.0, 1.0]]])  # the far one is not labelled
    out = keypoint_similarity(pred, target, BOX, AREA, torch.tensor([0.1, 0.1]))
    assert out.item() == pytest.approx(1.0)


def test_keypoint_similarity_without_labels_uses_the_enlarged_box() -> None:
    target = torch.zeros(1, 2, 3)
    inside = torch.tensor([[[-9.0, 19.0, 1.0], [15.0, -5.0, 1.0]]])  # within [-10, 20]²
    outside = torch.tensor([[[-12.0, 5.0, 1.0], [5.0, 5.0, 1.0]]])  # first one 2 px beyond x0
    sigmas = torch.tensor([0.1, 0.1], dtype=torch.float64)
    assert keypoint_similarity(inside, target, BOX, AREA, sigmas).item() == 1.0
    expected = (math.exp(-4 / (2 * 100 * 0.2**2)) + 1.0) / 2
    assert keypoint_similarity(outside, target, BOX, AREA, sigmas).item() == pytest.approx(expected)


def test_keypoint_sigmas_coco_skeleton() -> None:
    assert keypoint_sigmas(17).tolist() == list(COCO_KEYPOINT_SIGMAS)


def test_keypoint_sigmas_other_counts_use_the_mean_coco_sigma() -> None:
    mean = sum(COCO_KEYPOINT_SIGMAS) / 17
    assert keypoint_sigmas(5).tolist() == pytest.approx([mean] * 5)


def test_keypoint_sigmas_rejects_non_positive_counts() -> None:
    with pytest.raises(ValueError, match="num_keypoints must be positive, got 0"):
        keypoint_sigmas(0)


def test_keypoint_similarity_of_a_batch_equals_each_image_bitwise() -> None:
    g = torch.Generator().manual_seed(0)
    target = torch.cat(
        [torch.rand(2, 3, 5, 2, generator=g) * 20, torch.randint(0, 3, (2, 3, 5, 1), generator=g)],
        -1,
    )
    target[0, 1, :, 2] = 0  # a target without a visible keypoint: scored against its box
    pred = target[:, [0, 1, 2, 0]] + torch.randn(2, 4, 5, 3, generator=g)
    boxes = torch.tensor([[0.0, 0.0, 20.0, 20.0]]).expand(2, 3, 4)
    areas = torch.rand(2, 3, generator=g) * 300 + 10
    sigmas = keypoint_sigmas(5)
    batched = keypoint_similarity(pred, target, boxes, areas, sigmas)
    for i in range(2):
        expected = keypoint_similarity(pred[i], target[i], boxes[i], areas[i], sigmas)
        assert torch.equal(batched[i], expected)
