"""Image decoding and the bounded RAM cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from lucid_yolo.train.data.cache import ImageCache, load_image
from lucid_yolo.train.data.errors import ImageReadError


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


def test_load_image_missing_names_file(tmp_path: Path) -> None:
    with pytest.raises(ImageReadError, match=r"missing\.png: cannot read the image"):
        load_image(tmp_path / "missing.png", 64)


def test_load_image_not_an_image_names_file(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(b"not an image")
    with pytest.raises(ImageReadError, match=r"a\.png: cannot decode the image"):
        load_image(tmp_path / "a.png", 64)


def test_load_image_same_pixels_as_imread(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    path = tmp_path / "a.jpg"
    cv2.imwrite(str(path), rng.integers(0, 255, (40, 30, 3), dtype=np.uint8))
    image, _ = load_image(path, 40)
    expected = cv2.cvtColor(cv2.imread(str(path), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    np.testing.assert_array_equal(image, expected)


def test_load_image_non_utf8_file_name(tmp_path: Path) -> None:
    # cv2.imread on this name segfaulted the process (issue 15), hence the subprocess.
    path = Path(os.fsdecode(os.fsencode(tmp_path) + b"/bad\xff.png"))
    path.write_bytes(cv2.imencode(".png", np.zeros((20, 10, 3), np.uint8))[1].tobytes())
    code = (
        "import sys; from pathlib import Path; from lucid_yolo.train.data.cache import load_image;"
        "print(load_image(Path(sys.argv[1]), 20)[1])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, os.fsencode(path)], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (0, "(20, 10)\n")


def test_image_cache_stops_at_budget(tmp_path: Path) -> None:
    paths = [_write(tmp_path / f"{i}.png", 32, 32) for i in range(3)]
    cache = ImageCache(32, max_bytes=2 * 32 * 32 * 3)
    assert cache.fill(paths, threads=2) == 2
    assert cache.nbytes == 2 * 32 * 32 * 3
    assert cache.get(2) is None


def test_image_cache_rejects_negative_budget() -> None:
    with pytest.raises(ValueError, match="max_bytes=-1"):
        ImageCache(32, max_bytes=-1)
