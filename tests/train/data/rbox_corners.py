"""Corner points of ``xywhr`` rows as NumPy float32, the form the data pipeline carries."""

from __future__ import annotations

import numpy as np
import torch

from lucid_yolo.models.geometry import xywhr_to_corners
from lucid_yolo.train.data.labels import FloatArray


def corner_array(rboxes: FloatArray) -> FloatArray:
    """(n, 5) ``xywhr`` → (n, 4, 2) float32 corners, computed in float64 like the metric."""
    corners: FloatArray = xywhr_to_corners(torch.from_numpy(rboxes).double()).float().numpy()
    return corners.astype(np.float32, copy=False)
