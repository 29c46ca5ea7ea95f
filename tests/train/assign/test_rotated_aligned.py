"""Rotated task-aligned assignment: point-in-rotated-box candidates and ProbIoU alignment."""

from __future__ import annotations

import math

import pytest
import torch

from lucid_yolo.models import make_anchors
from lucid_yolo.train.assign import AssignedTargets, RotatedTaskAlignedAssigner

POINTS, _ = make_anchors([(4, 4)], [8])  # x, y in {4, 12, 20, 28}; index = 4 * row + col
A = 16


def _assign(assigner: RotatedTaskAlignedAssigner, rbox: list[float]) -> AssignedTargets:
    gt = torch.tensor([[rbox]])
    return assigner(
        torch.full((1, A, 1), 0.5),
        gt[:, :1].expand(1, A, 5),
        POINTS,
        torch.zeros(1, 1, dtype=torch.long),
        gt,
        torch.ones(1, 1, dtype=torch.bool),
    )


def _fg(targets: AssignedTargets) -> list[int]:
    return [i for i, flag in enumerate(targets.fg[0].tolist()) if flag]


def test_rotated_assigner_horizontal_bar_candidates() -> None:
    # x in (0, 24), y in (10, 14): the three points on row y = 12.
    out = _assign(RotatedTaskAlignedAssigner(1, stal_threshold=None), [12, 12, 24, 4, 0.0])
    assert _fg(out) == [4, 5, 6]


def test_rotated_assigner_rotation_changes_candidates() -> None:
    # The same bar turned upright about (12, 16): x in (10, 14), y in (4, 28).
    out = _assign(RotatedTaskAlignedAssigner(1, stal_threshold=None), [12, 16, 24, 4, math.pi / 2])
    assert _fg(out) == [5, 9]
    assert out.boxes.shape == (1, A, 5)
    assert out.scores[0, 5, 0].item() == pytest.approx(1.0, abs=1e-3)


def test_rotated_assigner_stal_widens_thin_side() -> None:
    # Upright bar 2 px thick at x = 16 holds no point; STAL widens its short side to 16 px:
    # x in (8, 24), y in (4, 28).
    thin = [16, 16, 24, 2, math.pi / 2]
    assert _fg(_assign(RotatedTaskAlignedAssigner(1, stal_threshold=None), thin)) == []
    assert _fg(_assign(RotatedTaskAlignedAssigner(1), thin)) == [5, 6, 9, 10]
