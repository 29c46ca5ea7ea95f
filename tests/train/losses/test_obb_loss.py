"""OBB loss: rotated decoding, ProbIoU box term, L1 and the elongation-weighted angle term."""

from __future__ import annotations

import math

import pytest
import torch
from loss_cases import POINTS, STRIDE, STRIDES, A, make_batch

from lucid_yolo.models.decode import xywhr_to_distances
from lucid_yolo.train.losses import OBBLoss, angle_loss

RBOX = [16.0, 16.0, 20.0, 8.0, 0.3]  # long-edge convention


def _obb_case(rbox: list[float], angle_shift: float = 0.0) -> tuple[dict, dict]:
    gt = torch.tensor(rbox)
    distances = (xywhr_to_distances(gt.expand(A, 5), POINTS) / STRIDES).T[None]  # (1, 4, A)
    angle = torch.tensor(rbox[4] + angle_shift)  # the raw output is the angle in radians
    outputs = {}
    for branch in ("o2m", "o2o"):
        outputs[f"{branch}.box"] = distances.clone().requires_grad_()
        outputs[f"{branch}.cls"] = torch.zeros(1, 1, A, requires_grad=True)
        outputs[f"{branch}.angle"] = angle.expand(1, 1, A).clone().requires_grad_()
    batch = dict(make_batch([[6.0, 12.0, 26.0, 20.0]], [0]))  # hull; unused by OBB
    batch["rboxes"] = gt[None, None]
    return outputs, batch


def test_angle_loss_by_hand() -> None:
    targets = torch.tensor([[0.0, 0.0, 3.0, 1.0, 0.0], [0.0, 0.0, 5.0, 5.0, 0.0]])
    # Needle 3x1 off by pi/2: sin^2 = 1, elongation (2/4)^2; a square has no angle to learn.
    values = angle_loss(torch.tensor([math.pi / 2, 0.4]), targets)
    assert torch.allclose(values, torch.tensor([0.25, 0.0]), atol=1e-6)


def test_angle_loss_wraps_at_range_ends() -> None:
    target = torch.tensor([0.0, 0.0, 4.0, 1.0, 3 * math.pi / 4 - 0.01])
    assert angle_loss(torch.tensor(-math.pi / 4 + 0.01), target).item() < 1e-3


def test_obb_loss_perfect_prediction_terms_near_zero() -> None:
    _, terms = OBBLoss(1, strides=(STRIDE,))(*_obb_case(RBOX), 0.0)  # type: ignore[arg-type]
    for branch in ("o2m", "o2o"):
        assert terms[f"{branch}/box"].item() == pytest.approx(0.0, abs=1e-3)
        assert terms[f"{branch}/l1"].item() == pytest.approx(0.0, abs=1e-5)
        assert terms[f"{branch}/angle"].item() == pytest.approx(0.0, abs=1e-8)


def test_obb_loss_angle_term_by_hand() -> None:
    _, terms = OBBLoss(1, strides=(STRIDE,))(*_obb_case(RBOX, angle_shift=0.2), 0.0)  # type: ignore[arg-type]
    elongation = (12 / 28) ** 2
    assert terms["o2m/angle"].item() == pytest.approx(math.sin(0.2) ** 2 * elongation, rel=1e-4)


def test_obb_loss_gradients_reach_angle_and_box() -> None:
    outputs, batch = _obb_case(RBOX, angle_shift=0.2)
    total, _ = OBBLoss(1, strides=(STRIDE,))(outputs, batch, 0.0)  # type: ignore[arg-type]
    total.backward()
    for key in ("o2m.angle", "o2o.angle", "o2m.box", "o2m.cls"):
        grad = outputs[key].grad
        assert grad is not None, key
        assert torch.isfinite(grad).all(), key
        assert grad.abs().sum() > 0, key
