"""End-to-end top-k decoding on hand-built raw outputs."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from lucid_yolo.models.decode import decode_dense, decode_end2end, topk, topk_dense, topk_pairs

A = 84  # anchors of a 64×64 input: 8·8 + 4·4 + 2·2


def raw_outputs(C: int = 3) -> dict[str, Tensor]:
    return {
        f"{branch}.{name}": tensor.clone()
        for branch in ("o2m", "o2o")
        for name, tensor in (("box", torch.ones(1, 4, A)), ("cls", torch.full((1, C, A), -9.0)))
    }


def test_topk_pairs_equals_flat_topk() -> None:
    scores = torch.rand(2, 50, 4, generator=torch.Generator().manual_seed(1))
    best, anchors, classes = topk_pairs(scores, 10)
    flat = scores.reshape(2, -1).topk(10, dim=1)
    torch.testing.assert_close(best, flat.values)
    assert torch.equal(anchors * 4 + classes, flat.indices)


def test_topk_pairs_caps_k_at_pair_count() -> None:
    best, _, _ = topk_pairs(torch.rand(1, 2, 3), 300)
    assert best.shape == (1, 6)


def test_decode_end2end_box_from_distances() -> None:
    raw = raw_outputs()
    # anchor 64 is the first P4 cell: centre (8, 8), stride 16
    raw["o2o.box"][0, :, 64] = torch.tensor([0.5, 0.25, 1.0, 2.0])
    raw["o2o.cls"][0, 2, 64] = 4.0
    (result,) = decode_end2end(raw, (64, 64))
    assert result.classes.tolist() == [2]
    torch.testing.assert_close(result.boxes, torch.tensor([[0.0, 4.0, 24.0, 40.0]]))
    torch.testing.assert_close(result.scores, torch.sigmoid(torch.tensor([4.0])))


def test_decode_end2end_one_anchor_may_carry_two_classes() -> None:
    raw = raw_outputs()
    raw["o2o.cls"][0, 0, 3] = 2.0
    raw["o2o.cls"][0, 1, 3] = 1.0
    (result,) = decode_end2end(raw, (64, 64))
    assert result.classes.tolist() == [0, 1]


def test_decode_end2end_reads_only_o2o_branch() -> None:
    raw = raw_outputs()
    raw["o2m.cls"][0, 0, 3] = 5.0
    (result,) = decode_end2end(raw, (64, 64))
    assert len(result) == 0


def test_decode_end2end_keypoints_in_pixels() -> None:
    raw = raw_outputs(C=1)
    raw["o2o.kpt"] = torch.zeros(1, 2 * 3, A)
    raw["o2o.kpt"][0, :, 0] = torch.tensor([1.0, -0.5, 0.0, 0.0, 0.0, 10.0])
    raw["o2o.cls"][0, 0, 0] = 3.0
    (result,) = decode_end2end(raw, (64, 64))
    assert result.keypoints is not None
    expected = torch.tensor([[[12.0, 0.0, 0.5], [4.0, 4.0, torch.sigmoid(torch.tensor(10.0))]]])
    torch.testing.assert_close(result.keypoints, expected)


def test_decode_end2end_obb_rotated_frame_distances() -> None:
    raw = raw_outputs(C=1)
    raw["o2o.angle"] = torch.zeros(1, 1, A)  # the raw output is the angle in radians
    raw["o2o.angle"][0, 0, 0] = math.pi / 4
    raw["o2o.box"][0, :, 0] = torch.tensor([1.0, 1.0, 3.0, 1.0])
    raw["o2o.cls"][0, 0, 0] = 3.0
    (result,) = decode_end2end(raw, (64, 64))
    assert result.rboxes is not None
    offset = 8.0 / math.sqrt(2)  # centre shifted 8 px along the box's axis at 45°
    expected = torch.tensor([[4.0 + offset, 4.0 + offset, 32.0, 16.0, math.pi / 4]])
    torch.testing.assert_close(result.rboxes, expected)


def test_decode_end2end_segment_masks_cropped_to_box() -> None:
    raw = raw_outputs(C=1)
    raw["o2o.mask_coef"] = torch.zeros(1, 2, A)
    raw["o2o.mask_coef"][0, 0, 0] = 1.0
    raw["protos"] = torch.ones(1, 2, 16, 16)
    raw["o2o.box"][0, :, 0] = torch.tensor([0.5, 0.5, 1.5, 2.5])  # box (0, 0, 16, 24)
    raw["o2o.cls"][0, 0, 0] = 3.0
    (result,) = decode_end2end(raw, (64, 64))
    assert result.masks is not None
    expected = torch.zeros(1, 64, 64, dtype=torch.bool)
    expected[0, :24, :16] = True
    assert torch.equal(result.masks, expected)


def test_decode_dense_keeps_static_shapes() -> None:
    dense = decode_dense(raw_outputs(C=5), (64, 64), branch="o2m")
    assert dense.boxes.shape == (1, A, 4)
    assert dense.scores.shape == (1, A, 5)


def test_topk_dense_flags_the_rows_decode_end2end_keeps() -> None:
    raw = raw_outputs()
    raw["o2o.cls"][0] = torch.randn(3, A, generator=torch.Generator().manual_seed(2)) * 3
    (cut,) = decode_end2end(raw, (64, 64), conf_threshold=0.995, max_det=20)
    dense = decode_dense(raw, (64, 64), branch="o2o")
    top = topk_dense(dense, 20, conf_threshold=0.995)
    valid = top["valid"][0]
    assert top["scores"].shape == (1, 20)
    assert 0 < len(cut) < 20
    assert torch.equal(top["scores"][0][valid], cut.scores)
    assert torch.equal(top["boxes"][0][valid], cut.boxes)
    assert torch.equal(top["classes"][0][valid], cut.classes)


def test_topk_dense_flags_nothing_without_a_threshold() -> None:
    dense = decode_dense(raw_outputs(), (64, 64), branch="o2o")
    assert "valid" not in topk_dense(dense, 20)


def _segment_outputs() -> dict[str, Tensor]:
    raw = raw_outputs(C=1)
    raw["o2o.mask_coef"] = torch.zeros(1, 2, A)
    raw["protos"] = torch.ones(1, 2, 16, 16)
    return raw


def test_topk_dense_without_masks_leaves_them_out() -> None:
    dense = decode_dense(_segment_outputs(), (64, 64), branch="o2o")
    assert topk_dense(dense, 10)["masks"].shape == (1, 10, 16, 16)
    without = topk_dense(dense, 10, masks=False)
    assert "masks" not in without
    assert without["mask_coef"].shape == (1, 10, 2)


def test_decode_end2end_builds_no_prototype_resolution_masks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*_: object) -> Tensor:
        raise AssertionError("decode_end2end never reads the top-k's prototype-resolution masks")

    monkeypatch.setattr(topk, "mask_probabilities", refuse)
    (result,) = decode_end2end(_segment_outputs(), (64, 64), conf_threshold=0.0, max_det=5)
    assert result.masks is not None
    assert result.masks.shape == (5, 64, 64)
