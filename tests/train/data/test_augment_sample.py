"""Sample: labels scaled into the pixels of a resized image."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lucid_yolo.train.data.augment.sample import sample_from_labels
from lucid_yolo.train.data.labels import ImageLabels


def test_sample_from_labels_scale_is_the_long_side_ratio() -> None:
    labels = ImageLabels(
        image_path=Path("a.png"),
        classes=np.zeros(0, dtype=np.int64),
        boxes=np.zeros((0, 4), dtype=np.float32),
    )
    # 48 x 120 resized to 64 on its long side is 26 x 64 (25.6 rounded): 64 / 120, not 26 / 48
    sample = sample_from_labels(np.zeros((26, 64, 3), np.uint8), labels, 0, (48, 120))
    assert sample.scale_pad == (64 / 120, 0.0, 0.0)


def test_sample_from_labels_scales_both_axes_by_the_long_side_ratio() -> None:
    labels = ImageLabels(
        image_path=Path("a.png"),
        classes=np.zeros(1, dtype=np.int64),
        boxes=np.array([[0.0, 0.5, 1.0, 1.0]], dtype=np.float32),
    )
    # the short side's content is 48 x 64 / 120 = 25.6 pixels in 26 rows: y = 12.8 and 25.6
    sample = sample_from_labels(np.zeros((26, 64, 3), np.uint8), labels, 0, (48, 120))
    np.testing.assert_allclose(sample.boxes, [[0.0, 12.8, 64.0, 25.6]], rtol=1e-6)
