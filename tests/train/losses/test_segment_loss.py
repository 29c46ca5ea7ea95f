"""Segmentation loss: cropped area-normalised mask BCE and the semantic auxiliary loss."""

from __future__ import annotations

import math

import pytest
import torch
from loss_cases import STRIDE, A, detect_outputs, make_batch

from lucid_yolo.train.losses import (
    SegmentationLoss,
    crop_weights,
    instance_mask_loss,
    semantic_loss,
    semantic_target,
)

GT = [0.0, 0.0, 16.0, 16.0]
M = 2


def test_crop_weights_pixel_centres_inside_box() -> None:
    crop = crop_weights(torch.tensor([1.0, 0.0, 3.0, 2.0]), 3, 4)
    expected = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.float32)
    assert torch.equal(crop, expected)


def test_instance_mask_loss_by_hand() -> None:
    logits = torch.zeros(1, 2, 4, 4)
    target = torch.zeros(1, 2, 4, 4)
    boxes = torch.tensor([[[0.0, 0.0, 2.0, 2.0], [0.0, 0.0, 4.0, 4.0]]])
    # Sample 0: 4 cropped pixels of ln 2 over area 4; sample 1 is padding (weight 0).
    loss = instance_mask_loss(logits, target, boxes, torch.tensor([[1.0, 0.0]]))
    assert loss.item() == pytest.approx(math.log(2))


def test_instance_mask_loss_pixels_normalisation_weighs_large_instances_more() -> None:
    logits = torch.zeros(1, 2, 4, 4)
    target = torch.zeros(1, 2, 4, 4)
    target[0, 1] = 1.0
    logits[0, 1] = 20.0  # the large instance is right, the small one costs ln 2 per pixel
    boxes = torch.tensor([[[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 4.0, 4.0]]])
    weight = torch.ones(1, 2)
    per_instance = instance_mask_loss(logits, target, boxes, weight, "instance")
    per_pixel = instance_mask_loss(logits, target, boxes, weight, "pixels")
    assert per_instance.item() == pytest.approx(math.log(2) / 2, rel=1e-6)
    assert per_pixel.item() == pytest.approx(math.log(2) / 17, rel=1e-5)


def test_instance_mask_loss_ignores_pixels_outside_box() -> None:
    logits = torch.full((1, 1, 4, 4), -20.0)
    logits[..., 3, 3] = 20.0  # confidently wrong, but outside the box
    boxes = torch.tensor([[[0.0, 0.0, 2.0, 2.0]]])
    loss = instance_mask_loss(logits, torch.zeros(1, 1, 4, 4), boxes, torch.ones(1, 1))
    assert loss.item() == pytest.approx(0.0, abs=1e-6)


def test_semantic_target_merges_instances_per_class() -> None:
    masks = torch.zeros(1, 3, 4, 4, dtype=torch.uint8)
    masks[0, 0, :2, :2] = 1
    masks[0, 1, 2:, 2:] = 1
    masks[0, 2] = 1  # padded row: ignored
    target = semantic_target(
        masks, torch.tensor([[1, 0, -1]]), torch.tensor([[True, True, False]]), 2, (2, 2)
    )
    assert target[0, 1].tolist() == [[1.0, 0.0], [0.0, 0.0]]
    assert target[0, 0].tolist() == [[0.0, 0.0], [0.0, 1.0]]


def test_semantic_target_max_pool_keeps_thin_objects() -> None:
    masks = torch.zeros(1, 1, 4, 4, dtype=torch.uint8)
    masks[0, 0, 1, :] = 1  # a one-pixel line
    target = semantic_target(masks, torch.tensor([[0]]), torch.tensor([[True]]), 1, (2, 2))
    assert target[0, 0].tolist() == [[1.0, 1.0], [0.0, 0.0]]


def test_semantic_loss_by_hand_at_zero_logits() -> None:
    target = torch.zeros(1, 1, 2, 2)
    target[0, 0, 0, 0] = 1
    # BCE ln 2; Dice = (2 * 0.5 + 1) / (4 * 0.5 + 1 + 1) = 0.5.
    assert semantic_loss(torch.zeros(1, 1, 2, 2), target).item() == pytest.approx(
        math.log(2) + 0.5, rel=1e-6
    )


def test_semantic_loss_near_zero_for_perfect_logits() -> None:
    target = torch.zeros(1, 2, 2, 2)
    target[0, 0, 0] = 1
    assert semantic_loss((target * 2 - 1) * 30, target).item() == pytest.approx(0.0, abs=1e-6)


def _segment_case() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    outputs = detect_outputs(GT)
    for branch in ("o2m", "o2o"):
        outputs[f"{branch}.mask_coef"] = torch.randn(1, M, A).requires_grad_()
    outputs["protos"] = torch.randn(1, M, 8, 8).requires_grad_()
    outputs["semantic"] = torch.randn(1, 1, 4, 4).requires_grad_()
    batch = dict(make_batch([GT], [0]))
    masks = torch.zeros(1, 1, 8, 8, dtype=torch.uint8)
    masks[0, 0, 1:3, 1:3] = 1
    batch["masks"] = masks
    return outputs, batch


def test_segmentation_loss_gradients_reach_mask_keys() -> None:
    outputs, batch = _segment_case()
    total, terms = SegmentationLoss(1, strides=(STRIDE,))(outputs, batch, 0.0)  # type: ignore[arg-type]
    total.backward()
    assert {"mask", "semantic", "o2m/mask", "o2o/mask"} <= set(terms)
    for key in ("o2m.mask_coef", "o2o.mask_coef", "protos", "semantic"):
        grad = outputs[key].grad
        assert grad is not None, key
        assert torch.isfinite(grad).all(), key
        assert grad.abs().sum() > 0, key


def _per_anchor_mask_losses(
    outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], branch: str
) -> list[float]:
    """Mask loss of each candidate anchor (0, 1, 4, 5) computed directly."""
    box = torch.tensor([[[0.0, 0.0, 4.0, 4.0]]])  # GT at prototype scale (input / 4)
    target = batch["masks"][:, :1].float()
    values = []
    for anchor in (0, 1, 4, 5):
        coef = outputs[f"{branch}.mask_coef"][0, :, anchor].detach()
        logits = torch.einsum("m,mhw->hw", coef, outputs["protos"][0].detach())[None, None]
        values.append(instance_mask_loss(logits, target, box, torch.ones(1, 1)).item())
    return values


def test_segmentation_loss_o2o_mask_term_is_its_positive_anchor() -> None:
    outputs, batch = _segment_case()
    _, terms = SegmentationLoss(1, strides=(STRIDE,))(outputs, batch, 0.0)  # type: ignore[arg-type]
    candidates = _per_anchor_mask_losses(outputs, batch, "o2o")
    assert any(terms["o2o/mask"].item() == pytest.approx(value, rel=1e-5) for value in candidates)


def test_segmentation_loss_o2m_mask_term_averages_positives() -> None:
    outputs, batch = _segment_case()
    _, terms = SegmentationLoss(1, strides=(STRIDE,))(outputs, batch, 0.0)  # type: ignore[arg-type]
    expected = sum(_per_anchor_mask_losses(outputs, batch, "o2m")) / 4
    assert terms["o2m/mask"].item() == pytest.approx(expected, rel=1e-5)


def test_segmentation_loss_caps_mask_samples() -> None:
    outputs, batch = _segment_case()
    loss = SegmentationLoss(1, strides=(STRIDE,), mask_samples=1)
    _, terms = loss(outputs, batch, 0.0)  # type: ignore[arg-type]
    candidates = _per_anchor_mask_losses(outputs, batch, "o2m")
    assert any(terms["o2m/mask"].item() == pytest.approx(value, rel=1e-5) for value in candidates)
    assert terms["o2m/mask"].item() != pytest.approx(sum(candidates) / 4, rel=1e-3)


def test_segmentation_loss_rejects_zero_samples() -> None:
    with pytest.raises(ValueError, match="mask_samples=0"):
        SegmentationLoss(1, mask_samples=0)
