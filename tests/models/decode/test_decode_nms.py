"""Class-wise greedy NMS (axis-aligned and rotated) and the NMS decode path."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lucid_yolo.models.decode import decode_nms, greedy_keep, nms, rotated_nms
from lucid_yolo.models.geometry import box_iou


def sequential_nms(boxes: Tensor, scores: Tensor, classes: Tensor, threshold: float) -> Tensor:
    order = scores.argsort(descending=True, stable=True).tolist()
    iou = box_iou(boxes[:, None], boxes[None])
    kept: list[int] = []
    for i in order:
        if all(classes[i] != classes[j] or iou[i, j] <= threshold for j in kept):
            kept.append(i)
    return torch.tensor(kept, dtype=torch.int64)


def test_box_iou_pairwise_known_values() -> None:
    a = torch.tensor([[0.0, 0.0, 2.0, 2.0]])
    b = torch.tensor([[1.0, 0.0, 3.0, 2.0], [5.0, 5.0, 6.0, 6.0], [0.0, 0.0, 2.0, 2.0]])
    torch.testing.assert_close(box_iou(a[:, None], b[None]), torch.tensor([[1 / 3, 0.0, 1.0]]))


def test_nms_drops_overlapping_box_of_same_class() -> None:
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 10.0, 10.0]])
    kept = nms(boxes, torch.tensor([0.8, 0.9]), torch.tensor([0, 0]), 0.5)
    assert kept.tolist() == [1]


def test_nms_keeps_overlapping_boxes_of_other_classes() -> None:
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 10.0, 10.0]])
    kept = nms(boxes, torch.tensor([0.8, 0.9]), torch.tensor([0, 1]), 0.5)
    assert kept.tolist() == [1, 0]


def test_nms_chain_keeps_box_whose_suppressor_was_suppressed() -> None:
    # A overlaps B, B overlaps C, A does not overlap C: greedy keeps A and C.
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [4.0, 0.0, 14.0, 10.0], [8.0, 0.0, 18.0, 10.0]])
    kept = nms(boxes, torch.tensor([0.9, 0.8, 0.7]), torch.zeros(3, dtype=torch.int64), 0.3)
    assert kept.tolist() == [0, 2]


def test_nms_equals_sequential_greedy_on_random_boxes() -> None:
    generator = torch.Generator().manual_seed(3)
    xy = torch.rand(300, 2, generator=generator) * 100
    wh = torch.rand(300, 2, generator=generator) * 30 + 2
    boxes = torch.cat((xy, xy + wh), dim=1)
    scores = torch.rand(300, generator=generator)
    classes = torch.randint(0, 3, (300,), generator=generator)
    expected = sequential_nms(boxes, scores, classes, 0.45)
    assert torch.equal(nms(boxes, scores, classes, 0.45), expected)


def test_nms_empty_input() -> None:
    kept = nms(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, dtype=torch.int64), 0.5)
    assert kept.shape == (0,)


def test_greedy_keep_without_suppression_keeps_all() -> None:
    assert greedy_keep(torch.zeros(4, 4, dtype=torch.bool)).all()


def test_rotated_nms_drops_same_box_at_equivalent_angle() -> None:
    rboxes = torch.tensor([[50.0, 50.0, 40.0, 10.0, 0.3], [50.0, 50.0, 40.0, 10.0, 0.3 + math.pi]])
    kept = rotated_nms(rboxes, torch.tensor([0.9, 0.8]), torch.tensor([0, 0]), 0.5)
    assert kept.tolist() == [0]


def test_rotated_nms_keeps_crossing_thin_boxes() -> None:
    # Axis-aligned hulls would overlap heavily; the rotated boxes barely do.
    rboxes = torch.tensor(
        [[50.0, 50.0, 80.0, 4.0, math.pi / 4], [50.0, 50.0, 80.0, 4.0, -math.pi / 4]]
    )
    kept = rotated_nms(rboxes, torch.tensor([0.9, 0.8]), torch.tensor([0, 0]), 0.5)
    assert kept.tolist() == [0, 1]


def detect_raw(A: int = 84, C: int = 2) -> dict[str, Tensor]:
    raw = {
        "o2m.box": torch.ones(1, 4, A),
        "o2m.cls": torch.full((1, C, A), -10.0),
        "o2o.box": torch.ones(1, 4, A),
        "o2o.cls": torch.full((1, C, A), -10.0),
    }
    return raw


def test_decode_nms_merges_neighbouring_anchors_of_one_object() -> None:
    raw = detect_raw()
    # anchors 9 and 10 are neighbours on the 8×8 P3 grid: boxes 16 px wide, shifted by 8 px
    raw["o2m.box"][0, :, 9:11] = 1.0
    raw["o2m.cls"][0, 1, 9] = 3.0
    raw["o2m.cls"][0, 1, 10] = 2.0
    (result,) = decode_nms(raw, (64, 64), conf_threshold=0.5, iou_threshold=0.3)
    assert result.classes.tolist() == [1]
    torch.testing.assert_close(result.boxes, torch.tensor([[4.0, 4.0, 20.0, 20.0]]))


def test_decode_nms_returns_rboxes_for_obb() -> None:
    raw = detect_raw()
    raw["o2m.angle"] = torch.zeros(1, 1, 84)
    raw["o2m.cls"][0, 0, 0] = 3.0
    (result,) = decode_nms(raw, (64, 64))
    assert result.rboxes is not None
    assert result.rboxes.shape == (1, 5)


def test_decode_nms_assembles_masks_for_segment() -> None:
    raw = detect_raw()
    raw["o2m.mask_coef"] = torch.ones(1, 2, 84)
    raw["protos"] = torch.ones(1, 2, 16, 16)
    raw["o2m.cls"][0, 0, 9] = 3.0  # box (4, 4, 20, 20)
    (result,) = decode_nms(raw, (64, 64))
    assert result.masks is not None
    assert result.masks.shape == (1, 64, 64)
    assert result.masks.sum().item() == 16 * 16
