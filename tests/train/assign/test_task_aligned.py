"""Task-aligned assignment checked by hand on a 4x4 grid of 8-px cells (32x32 input)."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.models import make_anchors
from lucid_yolo.train.assign import AssignedTargets, TaskAlignedAssigner

POINTS, _ = make_anchors([(4, 4)], [8])  # x, y in {4, 12, 20, 28}; index = 4 * row + col
A = 16


def _assign(
    assigner: TaskAlignedAssigner,
    boxes: list[list[float]],
    classes: list[int],
    *,
    pred_box: list[float],
    scores: torch.Tensor | None = None,
    valid: list[bool] | None = None,
) -> AssignedTargets:
    C = assigner.num_classes
    pred_scores = torch.full((1, A, C), 0.5) if scores is None else scores
    pred_boxes = torch.tensor(pred_box).expand(1, A, 4)
    gt_valid = torch.tensor([valid if valid is not None else [True] * len(boxes)])
    return assigner(
        pred_scores, pred_boxes, POINTS, torch.tensor([classes]), torch.tensor([boxes]), gt_valid
    )


def _fg(targets: AssignedTargets) -> list[int]:
    return [i for i, flag in enumerate(targets.fg[0].tolist()) if flag]


def test_task_aligned_assigner_empty_targets_are_background() -> None:
    out = _assign(
        TaskAlignedAssigner(2),
        [[0.0, 0.0, 16.0, 16.0]],
        [-1],
        pred_box=[0.0, 0.0, 16.0, 16.0],
        valid=[False],
    )
    assert not out.fg.any()
    assert out.labels.eq(-1).all()
    assert out.scores.eq(0).all()


def test_task_aligned_assigner_one_gt_takes_all_candidates() -> None:
    out = _assign(TaskAlignedAssigner(2), [[0.0, 0.0, 16.0, 16.0]], [1], pred_box=[0, 0, 16, 16])
    assert _fg(out) == [0, 1, 4, 5]
    assert out.labels[0, [0, 1, 4, 5]].tolist() == [1, 1, 1, 1]
    assert torch.allclose(out.scores[0, 0], torch.tensor([0.0, 1.0]), atol=1e-6)
    assert out.boxes[0, 5].tolist() == [0.0, 0.0, 16.0, 16.0]
    assert out.gt_index[0, 5].item() == 0


def test_task_aligned_assigner_topk_and_normalised_scores() -> None:
    scores = torch.zeros(1, A, 2)
    scores[0, [0, 1, 4, 5], 1] = torch.tensor([0.9, 0.4, 0.1, 0.6])
    # Predicted box (0, 0, 16, 8) has IoU 0.5 with the instance: targets scale to best IoU 0.5.
    out = _assign(
        TaskAlignedAssigner(2, topk=2),
        [[0.0, 0.0, 16.0, 16.0]],
        [1],
        pred_box=[0, 0, 16, 8],
        scores=scores,
    )
    assert _fg(out) == [0, 5]
    assert out.scores[0, 0, 1].item() == pytest.approx(0.5)
    assert out.scores[0, 5, 1].item() == pytest.approx(0.5 * (0.6 / 0.9) ** 0.5)


def test_task_aligned_assigner_one_to_one_keeps_single_anchor() -> None:
    scores = torch.zeros(1, A, 2)
    scores[0, [0, 1, 4, 5], 0] = torch.tensor([0.2, 0.4, 0.7, 0.6])
    out = _assign(
        TaskAlignedAssigner(2, topk=1),
        [[0.0, 0.0, 16.0, 16.0]],
        [0],
        pred_box=[0, 0, 16, 16],
        scores=scores,
    )
    assert _fg(out) == [4]
    assert out.scores[0, 4].tolist() == pytest.approx([1.0, 0.0])


def test_task_aligned_assigner_overlap_goes_to_highest_iou() -> None:
    # Prediction (6, 0, 22, 16): IoU 160/352 with instance 0, 224/288 with instance 1.
    out = _assign(
        TaskAlignedAssigner(2),
        [[0.0, 0.0, 16.0, 16.0], [8.0, 0.0, 24.0, 16.0]],
        [0, 1],
        pred_box=[6, 0, 22, 16],
    )
    assert _fg(out) == [0, 1, 2, 4, 5, 6]
    assert out.gt_index[0, [0, 4, 1, 5, 2, 6]].tolist() == [0, 0, 1, 1, 1, 1]
    assert out.labels[0, [0, 1]].tolist() == [0, 1]
    assert out.scores[0, 0, 0].item() == pytest.approx(160 / 352, rel=1e-5)


def test_task_aligned_assigner_tiny_gt_has_no_candidate_without_stal() -> None:
    out = _assign(
        TaskAlignedAssigner(2, stal_threshold=None),
        [[5.0, 5.0, 9.0, 9.0]],
        [0],
        pred_box=[5, 5, 9, 9],
    )
    assert not out.fg.any()


def test_task_aligned_assigner_tiny_gt_found_by_stal_surrogate() -> None:
    out = _assign(TaskAlignedAssigner(2), [[5.0, 5.0, 9.0, 9.0]], [0], pred_box=[5, 5, 9, 9])
    assert _fg(out) == [0, 1, 4, 5]
    # The surrogate only selects candidates: the target is still the true 4x4 box.
    assert out.boxes[0, 1].tolist() == [5.0, 5.0, 9.0, 9.0]
    assert out.scores[0, 1, 0].item() == pytest.approx(1.0, rel=1e-5)


def test_task_aligned_assigner_padded_rows_ignored() -> None:
    assigner = TaskAlignedAssigner(2)
    real = _assign(assigner, [[0.0, 0.0, 16.0, 16.0]], [1], pred_box=[0, 0, 32, 32])
    padded = _assign(
        assigner,
        [[0.0, 0.0, 16.0, 16.0], [0.0, 0.0, 32.0, 32.0]],
        [1, 0],
        pred_box=[0, 0, 32, 32],
        valid=[True, False],
    )
    assert torch.equal(real.fg, padded.fg)
    assert torch.equal(real.scores, padded.scores)
    assert torch.equal(real.labels, padded.labels)


def test_task_aligned_assigner_rejects_channel_first_scores() -> None:
    with pytest.raises(ValueError, match=r"transpose the \(B, C, A\)"):
        TaskAlignedAssigner(3)(
            torch.zeros(1, 3, A),
            torch.zeros(1, A, 4),
            POINTS,
            torch.zeros(1, 1, dtype=torch.long),
            torch.zeros(1, 1, 4),
            torch.zeros(1, 1, dtype=torch.bool),
        )


def test_task_aligned_assigner_rejects_zero_instance_rows() -> None:
    with pytest.raises(ValueError, match="at least one instance row"):
        TaskAlignedAssigner(2)(
            torch.zeros(1, A, 2),
            torch.zeros(1, A, 4),
            POINTS,
            torch.zeros(1, 0, dtype=torch.long),
            torch.zeros(1, 0, 4),
            torch.zeros(1, 0, dtype=torch.bool),
        )


def test_task_aligned_assigner_rejects_small_stal_size() -> None:
    with pytest.raises(ValueError, match=r"stal_size=4\.0 is below"):
        TaskAlignedAssigner(2, stal_threshold=8.0, stal_size=4.0)


def test_task_aligned_assigner_iou_exponent_by_hand() -> None:
    pred_boxes = torch.tensor([0.0, 0.0, 16.0, 16.0]).repeat(1, A, 1)
    pred_boxes[0, 5] = torch.tensor([0.0, 0.0, 16.0, 8.0])  # IoU 0.5
    assigner = TaskAlignedAssigner(1, topk=4, beta=6.0)
    out = assigner(
        torch.full((1, A, 1), 0.5),
        pred_boxes,
        POINTS,
        torch.tensor([[0]]),
        torch.tensor([[[0.0, 0.0, 16.0, 16.0]]]),
        torch.tensor([[True]]),
    )
    # Equal scores: anchor 5 aligns 0.5^6 as well as the perfect anchors, whose best IoU is 1.
    assert out.scores[0, 0, 0].item() == pytest.approx(1.0)
    assert out.scores[0, 5, 0].item() == pytest.approx(0.5**6)
