"""Image decoding and the bounded RAM cache."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from lucid_yolo.train.data.cache import ImageCache, load_image


def _write(path: Path, h: int, w: int) -> Path:
    image = np.zeros((h, w, 3), dtype=np.uint8)
    image[..., 2] = 255  # red in BGR
    cv2.imwrite(str(path), image)
    return path


def test_load_image_rgb_resized_long_side(tmp_path: Path) -> None:
    image, size = load_image(_write(tmp_path / "a.png", 50, 100), 64)
    assert size == (50, 100)
    assert image.shape == (32, 64, 3)
    assert image[0, 0].tolist() == [255, 0, 0]


def test_image_cache_stops_at_budget(tmp_path: Path) -> None:
    paths = [_write(tmp_path / f"{i}.png", 32, 32) for i in range(3)]
    cache = ImageCache(32, max_bytes=2 * 32 * 32 * 3)
    assert cache.fill(paths, threads=2) == 2
    assert cache.nbytes == 2 * 32 * 32 * 3
    assert cache.get(2) is None


def test_image_cache_rejects_negative_budget() -> None:
    with pytest.raises(ValueError, match="max_bytes=-1"):
        ImageCache(32, max_bytes=-1)
