"""COCO OKS and the sigma rule."""

from __future__ import annotations

import math

import pytest
import torch

from lucid_yolo.train.geometry import COCO_KEYPOINT_SIGMAS, keypoint_oks, keypoint_sigmas


def test_keypoint_sigmas_coco_for_17_points() -> None:
    sigmas = keypoint_sigmas(17)
    assert sigmas == COCO_KEYPOINT_SIGMAS
    assert sigmas[0] == pytest.approx(0.026)
    assert sigmas[11] == pytest.approx(0.107)


def test_keypoint_sigmas_mean_coco_sigma_for_other_counts() -> None:
    mean = sum(COCO_KEYPOINT_SIGMAS) / len(COCO_KEYPOINT_SIGMAS)
    assert keypoint_sigmas(4) == (mean,) * 4


def test_keypoint_sigmas_rejects_empty_skeleton() -> None:
    with pytest.raises(ValueError, match="num_keypoints must be positive, got 0"):
        keypoint_sigmas(0)


def test_keypoint_oks_by_hand() -> None:
    pred = torch.tensor([[3.0, 4.0], [10.0, 10.0]])
    target = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    visible = torch.tensor([True, False])
    oks = keypoint_oks(pred, target, visible, torch.tensor(100.0), torch.tensor([0.5, 0.5]))
    # d^2 = 25, s^2 = 100, k = 2 sigma = 1: exp(-25 / 200); the unlabelled point is ignored.
    assert oks.item() == pytest.approx(math.exp(-0.125), rel=1e-6)


def test_keypoint_oks_no_labelled_points_is_zero() -> None:
    oks = keypoint_oks(
        torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3), torch.tensor(1.0), torch.ones(3)
    )
    assert oks.item() == 0.0
