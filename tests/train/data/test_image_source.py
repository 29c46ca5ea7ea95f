"""Images to predict: listing a file or a folder, and label-free entries."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from lucid_yolo.train.data.errors import DatasetConfigError
from lucid_yolo.train.data.image_source import list_images, unlabelled


def _image(path: Path) -> Path:
    cv2.imwrite(str(path), np.zeros((8, 8, 3), dtype=np.uint8))
    return path


def test_list_images_single_file(tmp_path: Path) -> None:
    image = _image(tmp_path / "a.png")
    assert list_images(image) == [image]


def test_list_images_folder_sorted_images_only(tmp_path: Path) -> None:
    paths = [_image(tmp_path / name) for name in ("b.jpg", "a.PNG")]
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "sub").mkdir()
    _image(tmp_path / "sub" / "c.png")
    assert list_images(str(tmp_path)) == sorted(paths)


def test_list_images_missing_path(tmp_path: Path) -> None:
    with pytest.raises(DatasetConfigError, match="no such file or folder"):
        list_images(tmp_path / "nothing")


def test_list_images_folder_without_images(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(DatasetConfigError, match="holds no image"):
        list_images(tmp_path)


def test_list_images_stem_clash(tmp_path: Path) -> None:
    _image(tmp_path / "a.png")
    _image(tmp_path / "a.jpg")
    with pytest.raises(DatasetConfigError, match=r"\['a'\] share a name"):
        list_images(tmp_path)


def test_unlabelled_entries_have_no_instances(tmp_path: Path) -> None:
    images = [_image(tmp_path / "a.png"), _image(tmp_path / "b.png")]
    entries = unlabelled(images)
    assert [entry.image_path for entry in entries] == images
    assert [len(entry) for entry in entries] == [0, 0]
    assert entries[0].boxes.shape == (0, 4)
