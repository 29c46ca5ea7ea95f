"""Detection loss (shared base): named terms, hand-computed values, ProgLoss mix, gradients."""

from __future__ import annotations

import math

import pytest
import torch
from loss_cases import POINTS, STRIDE, STRIDES, A, detect_outputs, make_batch

from lucid_yolo.models import distances_to_xyxy
from lucid_yolo.models.cpu_threads import one_cpu_thread
from lucid_yolo.models.geometry import box_iou
from lucid_yolo.train.losses import DetectionLoss, LossGains

GT = [0.0, 0.0, 16.0, 16.0]  # anchors 0, 1, 4, 5 are its candidates


def _loss(**kwargs: object) -> DetectionLoss:
    return DetectionLoss(1, strides=(STRIDE,), **kwargs)  # type: ignore[arg-type]


def test_detection_loss_empty_targets_finite_and_background_only() -> None:
    outputs = detect_outputs(GT)
    total, terms = _loss()(outputs, make_batch([GT], [-1], valid=[False]), 0.0)
    assert torch.isfinite(total)
    assert terms["o2m/box"].item() == 0.0
    assert terms["o2m/l1"].item() == 0.0
    # 16 anchors of BCE(0, 0) = ln 2, normalised by max(score sum, 1) = 1.
    assert terms["o2m/cls"].item() == pytest.approx(16 * math.log(2))


def test_detection_loss_cls_by_hand() -> None:
    _, terms = _loss()(detect_outputs(GT), make_batch([GT], [0]), 0.0)
    # o2m: 4 positives with target 1 (perfect boxes); every anchor costs ln 2 at logit 0.
    assert terms["o2m/cls"].item() == pytest.approx(16 * math.log(2) / 4, rel=1e-5)
    assert terms["o2o/cls"].item() == pytest.approx(16 * math.log(2), rel=1e-5)
    # ProgLoss at the first epoch: 0.8 * o2m + 0.2 * o2o, then the cls gain 0.5.
    expected = 0.5 * (0.8 * 4 + 0.2 * 16) * math.log(2)
    assert terms["cls"].item() == pytest.approx(expected, rel=1e-5)
    assert terms["box"].item() == pytest.approx(0.0, abs=1e-5)


def test_detection_loss_box_and_l1_by_hand() -> None:
    # Every anchor predicts (0, 0, 24, 16): right edge one stride too far, IoU 2/3.
    _, terms = _loss()(detect_outputs([0.0, 0.0, 24.0, 16.0]), make_batch([GT], [0]), 0.0)
    iou = 2 / 3
    v = 4 / math.pi**2 * (math.atan(1.0) - math.atan(1.5)) ** 2
    ciou = iou - 16 / (24**2 + 16**2) - v * v / (v - iou + 1)
    assert terms["o2m/box"].item() == pytest.approx(1 - ciou, rel=1e-5)
    assert terms["o2m/l1"].item() == pytest.approx(0.25, rel=1e-5)


def test_detection_loss_total_is_gained_sum_times_batch() -> None:
    total, terms = _loss(gains=LossGains(box=1.0, cls=2.0, l1=3.0))(
        detect_outputs([0.0, 0.0, 24.0, 16.0]), make_batch([GT], [0]), 0.0
    )
    expected = terms["box"] + terms["cls"] + terms["l1"]
    assert total.item() == pytest.approx(expected.item(), rel=1e-6)
    assert terms["cls"].item() == pytest.approx(
        2.0 * (0.8 * terms["o2m/cls"] + 0.2 * terms["o2o/cls"]).item(), rel=1e-6
    )


def test_detection_loss_last_epoch_weights_o2o() -> None:
    _, terms = _loss()(detect_outputs(GT), make_batch([GT], [0]), torch.tensor(1.0))
    assert terms["o2m_weight"].item() == pytest.approx(0.1)
    expected = 0.5 * (0.1 * terms["o2m/cls"] + 0.9 * terms["o2o/cls"])
    assert terms["cls"].item() == pytest.approx(expected.item(), rel=1e-6)


def test_detection_loss_terms_are_detached() -> None:
    total, terms = _loss()(detect_outputs(GT), make_batch([GT], [0]), 0.0)
    assert total.requires_grad
    assert not any(value.requires_grad for value in terms.values())


def test_detection_loss_gradients_reach_both_branches() -> None:
    torch.manual_seed(0)
    outputs = {
        key: (value.detach() + 0.1 * torch.randn_like(value)).requires_grad_()
        for key, value in detect_outputs([2.0, 1.0, 20.0, 14.0]).items()
    }
    total, _ = _loss()(outputs, make_batch([GT], [0]), 0.5)
    total.backward()
    for key, value in outputs.items():
        assert value.grad is not None, key
        assert torch.isfinite(value.grad).all(), key
        assert value.grad.abs().sum() > 0, key


def test_detection_loss_wild_background_predictions_stay_finite() -> None:
    outputs = detect_outputs(GT)
    wild = outputs["o2m.box"].detach().clone()
    wild[..., [2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]] = 1e30
    outputs["o2m.box"] = wild.requires_grad_()
    total, _ = _loss()(outputs, make_batch([GT], [0]), 0.0)
    total.backward()
    assert torch.isfinite(total)
    assert outputs["o2m.box"].grad is not None
    assert torch.isfinite(outputs["o2m.box"].grad).all()


def test_detection_loss_scales_total_by_batch_size() -> None:
    single = make_batch([GT], [0])
    double = {key: torch.cat([value, value]) for key, value in single.items()}
    outputs = detect_outputs(GT)  # score sums of 1 per image, so max(sum, 1) never binds
    doubled = {key: torch.cat([value, value]) for key, value in outputs.items()}
    total_1, _ = _loss()(outputs, single, 0.0)
    total_2, _ = _loss()(doubled, double, 0.0)  # type: ignore[arg-type]
    assert total_2.item() == pytest.approx(2 * total_1.item(), rel=1e-5)


def test_detection_loss_rejects_wrong_strides() -> None:
    loss = DetectionLoss(1, strides=(8, 16))
    with pytest.raises(ValueError, match="outputs have 16 anchors"):
        loss(detect_outputs(GT), make_batch([GT], [0]), 0.0)


def test_detection_loss_fits_free_outputs_with_one_o2o_anchor_per_instance() -> None:
    # Optimise the raw outputs themselves: the loss alone must pull the one-to-one branch to a
    # single confident, well-placed anchor per instance (what makes it NMS-free).
    torch.manual_seed(0)
    gts = [[3.0, 5.0, 19.0, 27.0], [18.0, 2.0, 30.0, 12.0]]
    outputs = {
        key: (bias + 0.3 * torch.randn(1, channels, A)).requires_grad_()
        for key, channels, bias in [
            ("o2m.box", 4, 1.5),
            ("o2m.cls", 2, 0.0),
            ("o2o.box", 4, 1.5),
            ("o2o.cls", 2, 0.0),
        ]
    }
    loss = DetectionLoss(2, strides=(STRIDE,))
    optimizer = torch.optim.Adam(outputs.values(), lr=0.05)
    batch = make_batch(gts, [0, 1])
    with one_cpu_thread():
        for step in range(300):
            total, _ = loss(outputs, batch, step / 299)
            optimizer.zero_grad()
            total.backward()
            optimizer.step()
    scores = outputs["o2o.cls"].detach().sigmoid()[0]  # (C, A)
    boxes = distances_to_xyxy(outputs["o2o.box"].detach()[0].T * STRIDES, POINTS)
    for class_id, gt in enumerate(gts):
        top = scores[class_id].topk(2)
        assert top.values[0] > 0.9
        assert top.values[1] < 0.1
        assert box_iou(boxes[top.indices[0]], torch.tensor(gt)) > 0.9
