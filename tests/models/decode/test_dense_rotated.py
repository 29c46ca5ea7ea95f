"""Rotated-box decoding shared by the decoder and the OBB loss: angle range, distance transforms."""

from __future__ import annotations

import math

import torch

from lucid_yolo.models.decode import (
    decode_rboxes,
    distances_to_xywhr,
    xywhr_to_distances,
)


def test_xywhr_distances_round_trip() -> None:
    rboxes = torch.tensor([[10.0, 12.0, 9.0, 3.0, 0.7], [20.0, 5.0, 6.0, 6.0, -0.5]])
    points = torch.tensor([[11.0, 11.0], [19.0, 6.0]])
    distances = xywhr_to_distances(rboxes, points)
    assert torch.allclose(distances_to_xywhr(distances, rboxes[:, 4], points), rboxes, atol=1e-6)


def test_xywhr_to_distances_axis_aligned_by_hand() -> None:
    distances = xywhr_to_distances(
        torch.tensor([10.0, 10.0, 8.0, 4.0, 0.0]), torch.tensor([9.0, 11.0])
    )
    assert distances.tolist() == [3.0, 3.0, 5.0, 1.0]


def test_decode_rboxes_is_the_long_edge_form_of_the_raw_boxes() -> None:
    points = torch.tensor([[8.0, 8.0]])
    distances = torch.tensor([[[1.0, 4.0, 1.0, 4.0]]])  # 2 wide, 8 tall: the long edge is h
    raw = distances_to_xywhr(distances, torch.tensor([[0.0]]), points)
    decoded = decode_rboxes(distances, torch.tensor([[0.0]]), points)
    assert raw[0, 0, 2:4].tolist() == [2.0, 8.0]
    assert decoded[0, 0, 2:4].tolist() == [8.0, 2.0]
    assert math.isclose(float(decoded[0, 0, 4]), math.pi / 2, abs_tol=1e-6)
