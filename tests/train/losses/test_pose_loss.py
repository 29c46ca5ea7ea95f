"""Pose loss: clamped Laplace likelihood, OKS and visibility terms."""

from __future__ import annotations

import math

import pytest
import torch
from loss_cases import POINTS, STRIDE, A, detect_outputs, make_batch

from lucid_yolo.train.geometry import COCO_KEYPOINT_SIGMAS
from lucid_yolo.train.losses import PoseLoss, laplace_nll

GT = [0.0, 0.0, 16.0, 16.0]
KEYPOINTS = [[4.0, 4.0, 2.0], [12.0, 10.0, 1.0], [0.0, 0.0, 0.0]]  # last one unlabelled
K = len(KEYPOINTS)


def _pose_case(offset: float = 0.0, log_scale: float = 0.0) -> tuple[dict, dict]:
    outputs = detect_outputs(GT)
    labelled = torch.tensor(KEYPOINTS)
    # Every anchor predicts every keypoint, shifted by `offset` pixels in x.
    dxy = (labelled[None, :, :2] + torch.tensor([offset, 0.0]) - POINTS[:, None]) / STRIDE
    kpt = torch.cat((dxy, torch.zeros(A, K, 1)), dim=-1)  # (A, K, 3)
    for branch in ("o2m", "o2o"):
        outputs[f"{branch}.kpt"] = (
            kpt.permute(1, 2, 0).reshape(1, K * 3, A).clone().requires_grad_()
        )
        outputs[f"{branch}.kpt_scale"] = torch.full((1, K * 2, A), log_scale, requires_grad=True)
    batch = dict(make_batch([GT], [0]))
    batch["keypoints"] = labelled[None, None]
    return outputs, batch


def _terms(outputs: dict, batch: dict, **kwargs: object) -> dict[str, torch.Tensor]:
    loss = PoseLoss(1, strides=(STRIDE,), num_keypoints=K, **kwargs)  # type: ignore[arg-type]
    _, terms = loss(outputs, batch, 0.0)
    return terms


def test_laplace_nll_by_hand() -> None:
    value = laplace_nll(torch.tensor(3.0), torch.tensor(1.0), torch.tensor(math.log(0.5)))
    assert value.item() == pytest.approx(math.log(2 * 0.5) + 2 / 0.5)


def test_laplace_nll_finite_under_extreme_log_scales() -> None:
    log_scale = torch.tensor([-1e30, 1e30, -math.inf, math.inf, -88.0, 88.0], requires_grad=True)
    residual = torch.full((6,), 1e6, requires_grad=True)
    value = laplace_nll(residual, torch.zeros(6), log_scale)
    value.sum().backward()
    assert torch.isfinite(value).all()
    assert log_scale.grad is not None
    assert torch.isfinite(log_scale.grad).all()
    assert residual.grad is not None
    assert torch.isfinite(residual.grad).all()


def test_laplace_nll_clamps_scale() -> None:
    value = laplace_nll(torch.tensor(1.0), torch.tensor(0.0), torch.tensor(-100.0))
    assert value.item() == pytest.approx(math.log(2) - 5 + math.exp(5))


def test_pose_loss_perfect_keypoints_by_hand() -> None:
    terms = _terms(*_pose_case())
    for branch in ("o2m", "o2o"):
        # Two labelled keypoints, each x and y costing ln 2 + 0 + 0 at log-scale 0.
        assert terms[f"{branch}/kpt_nll"].item() == pytest.approx(2 * math.log(2), rel=1e-5)
        assert terms[f"{branch}/kpt_oks"].item() == pytest.approx(0.0, abs=1e-6)
        assert terms[f"{branch}/kpt_vis"].item() == pytest.approx(math.log(2), rel=1e-5)


def test_pose_loss_oks_by_hand() -> None:
    # 2 px off in x; box area 256; K != 17, so every sigma is the mean COCO sigma, k = 2 sigma.
    terms = _terms(*_pose_case(offset=2.0))
    k = 2 * sum(COCO_KEYPOINT_SIGMAS) / len(COCO_KEYPOINT_SIGMAS)
    expected = 1 - math.exp(-4 / (2 * 256 * k**2))
    assert terms["o2m/kpt_oks"].item() == pytest.approx(expected, rel=1e-5)
    # The NLL grows by |2 px| / 8 px-per-stride for each labelled x.
    assert terms["o2m/kpt_nll"].item() == pytest.approx(2 * math.log(2) + 0.25, rel=1e-5)


def test_pose_loss_finite_under_extreme_outputs() -> None:
    outputs, batch = _pose_case(offset=1e4, log_scale=-1e30)
    total, _ = PoseLoss(1, strides=(STRIDE,), num_keypoints=K)(outputs, batch, 0.0)  # type: ignore[arg-type]
    total.backward()
    assert torch.isfinite(total)
    for key in ("o2m.kpt", "o2m.kpt_scale", "o2o.kpt"):
        assert torch.isfinite(outputs[key].grad).all(), key


def test_pose_loss_gradients_reach_keypoint_keys() -> None:
    outputs, batch = _pose_case(offset=3.0, log_scale=0.5)
    total, _ = PoseLoss(1, strides=(STRIDE,), num_keypoints=K)(outputs, batch, 0.0)  # type: ignore[arg-type]
    total.backward()
    for key in ("o2m.kpt", "o2m.kpt_scale", "o2o.kpt", "o2o.kpt_scale"):
        assert outputs[key].grad.abs().sum() > 0, key


def test_pose_loss_rejects_channel_mismatch() -> None:
    outputs, batch = _pose_case()
    with pytest.raises(ValueError, match="expected 3 \\* num_keypoints = 51"):
        PoseLoss(1, strides=(STRIDE,))(outputs, batch, 0.0)  # type: ignore[arg-type]


def test_pose_loss_rejects_wrong_sigma_count() -> None:
    with pytest.raises(ValueError, match="got 2 sigmas for num_keypoints=3"):
        PoseLoss(1, num_keypoints=3, sigmas=[0.1, 0.2])
