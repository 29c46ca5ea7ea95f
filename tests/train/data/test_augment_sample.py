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
