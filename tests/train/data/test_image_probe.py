"""Image probe: sizes from headers, and each kind of broken file named with its fix."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from lucid_yolo.train.data.errors import ImageReadError
from lucid_yolo.train.data.image_probe import probe_image


@pytest.mark.parametrize("suffix", [".jpg", ".png", ".bmp", ".tiff", ".webp"])
def test_probe_image_reads_size(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"a{suffix}"
    cv2.imwrite(str(path), np.zeros((13, 21, 3), np.uint8))
    assert probe_image(path) == (13, 21)


def test_probe_image_jpeg_with_large_app_segment(tmp_path: Path) -> None:
    path = tmp_path / "a.jpg"
    cv2.imwrite(str(path), np.zeros((13, 21, 3), np.uint8))
    data = path.read_bytes()
    app = b"\xff\xe1" + (65000).to_bytes(2, "big") + bytes(64998)
    path.write_bytes(data[:2] + app + app + data[2:])
    assert probe_image(path) == (13, 21)


@pytest.mark.parametrize(
    ("suffix", "cut", "message"),
    [
        (".jpg", 10, r"JPEG end marker FFD9 missing: the file is truncated"),
        (".png", 10, r"PNG end chunk IEND missing: the file is truncated"),
    ],
)
def test_probe_image_truncated(tmp_path: Path, suffix: str, cut: int, message: str) -> None:
    path = tmp_path / f"a{suffix}"
    cv2.imwrite(str(path), np.random.default_rng(0).integers(0, 255, (32, 32, 3), np.uint8))
    path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(ImageReadError, match=rf"a\{suffix}: {message}; replace or remove"):
        probe_image(path)


def test_probe_image_empty_file(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"")
    with pytest.raises(ImageReadError, match=r"a\.jpg: the image file is empty"):
        probe_image(tmp_path / "a.jpg")


def test_probe_image_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ImageReadError, match=r"nope\.png: cannot read the image"):
        probe_image(tmp_path / "nope.png")


def test_probe_image_wrong_content(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"<html>not found</html>")
    with pytest.raises(ImageReadError, match=r"a\.jpg: content is not a JPG image \(first bytes"):
        probe_image(tmp_path / "a.jpg")


def test_probe_image_undecodable_other_format(tmp_path: Path) -> None:
    (tmp_path / "a.tiff").write_bytes(b"II*\x00garbage")
    with pytest.raises(ImageReadError, match=r"a\.tiff: OpenCV cannot decode it"):
        probe_image(tmp_path / "a.tiff")
