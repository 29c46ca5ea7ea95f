"""Ultralytics rows: writing then parsing any valid instance gives it back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lucid_yolo.train.data.dataset_yaml import Task
from lucid_yolo.train.data.formats import RowError, format_rows, parse_row
from lucid_yolo.train.data.formats.geometry import LabelRows

coord = st.floats(0.0625, 0.9375, width=32)


@st.composite
def _instances(draw: st.DrawFn, task: Task) -> LabelRows:
    rows = LabelRows()
    for _ in range(draw(st.integers(0, 3))):
        x1, x2 = sorted(draw(st.lists(coord, min_size=2, max_size=2, unique=True)))
        y1, y2 = sorted(draw(st.lists(coord, min_size=2, max_size=2, unique=True)))
        corners = np.array([[x1, y1], [x2, y1], [x2, y2], [x1, y2]], np.float32)
        rows.classes.append(draw(st.integers(0, 2)))
        rows.boxes.append(np.array([x1, y1, x2, y2], np.float32))
        rows.polygons.append(corners)
        rows.corners.append(corners)
        rows.difficult.append(False)
        visibility = np.array(draw(st.lists(st.sampled_from([0, 1, 2]), min_size=2, max_size=2)))
        keypoints = np.concatenate([corners[:2], visibility[:, None]], axis=1).astype(np.float32)
        keypoints[visibility == 0, :2] = 0
        rows.keypoints.append(keypoints)
    return rows


@settings(max_examples=40, deadline=None)
@given(st.data(), st.sampled_from(["detect", "segment", "pose", "obb"]))
def test_format_rows_then_parse_row_round_trip(data: st.DataObject, task: Task) -> None:
    original = data.draw(_instances(task)).build(Path("a.png"), task, 2, "a.txt")
    parsed = LabelRows()
    for line in format_rows(original, task):
        parse_row(line.split(), parsed, task=task, num_classes=3, kpt_shape=(2, 3))
    back = parsed.build(Path("a.png"), task, 2, "a.txt")
    np.testing.assert_array_equal(back.classes, original.classes)
    np.testing.assert_allclose(back.boxes, original.boxes, atol=1e-6)
    if task == "pose":
        np.testing.assert_allclose(back.keypoints, original.keypoints, atol=1e-6)  # type: ignore[arg-type]
    if task == "obb":
        np.testing.assert_allclose(back.corners, original.corners, atol=1e-6)  # type: ignore[arg-type]


def test_parse_row_rejected_row_leaves_rows_untouched() -> None:
    rows = LabelRows()
    with pytest.raises(RowError, match=r"the instance has no area"):
        parse_row(["0", *["0.2"] * 6], rows, task="segment", num_classes=1)
    assert rows == LabelRows()
