"""Where ``predict --output.draw`` puts labels: inside the image, clear of each other."""

from __future__ import annotations

import numpy as np
import torch

from lucid_yolo.cli.prediction_output import draw, label_box


def test_label_box_goes_above_the_box_when_there_is_room() -> None:
    assert label_box((40, 12), (10, 50), (100, 100), []) == (10, 38, 50, 50)


def test_label_box_at_the_image_top_goes_inside_the_box() -> None:
    assert label_box((40, 12), (10, 3), (100, 100), []) == (10, 3, 50, 15)


def test_label_box_at_the_right_edge_shifts_left() -> None:
    assert label_box((40, 12), (90, 50), (100, 100), []) == (60, 38, 100, 50)


def test_label_box_moves_below_a_label_it_would_cover() -> None:
    first = label_box((40, 12), (10, 50), (100, 100), [])
    second = label_box((40, 12), (20, 52), (100, 100), [first])
    assert second == (20, 50, 60, 62)


def test_draw_writes_labels_inside_the_image() -> None:
    image = np.zeros((64, 64, 3), dtype=np.uint8)
    predictions = {
        "boxes": torch.tensor([[0.0, 0.0, 30.0, 30.0]]),
        "scores": torch.tensor([0.9]),
        "classes": torch.tensor([0]),
    }
    canvas = draw(image, predictions, ("circle",))
    assert canvas.shape == image.shape
    assert canvas[1:8, 1:20].any()  # the label's background sits inside the box's top
