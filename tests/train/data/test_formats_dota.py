"""DOTA labelTxt reading: corners normalised, difficult kept, headers skipped, bad rows located."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from lucid_yolo.train.data.errors import DataWarning, LabelFormatError
from lucid_yolo.train.data.formats import read_dota

HEADER = "imagesource:GoogleEarth\ngsd:0.146\n"


def _dota(tmp_path: Path, labels: dict[str, str]) -> tuple[Path, Path]:
    images, label_dir = tmp_path / "images", tmp_path / "labelTxt"
    images.mkdir()
    label_dir.mkdir()
    for stem, text in labels.items():
        cv2.imwrite(str(images / f"{stem}.png"), np.zeros((50, 100, 3), np.uint8))
        if text:
            (label_dir / f"{stem}.txt").write_text(text)
    return images, label_dir


def test_read_dota_corners_difficult_and_header(tmp_path: Path) -> None:
    rows = HEADER + "10 5 60 5 60 45 10 45 plane 0\n20 10 30 10 30 20 20 20 ship 1\n"
    dataset = read_dota(*_dota(tmp_path, {"P1": rows}))
    (labels,) = dataset.labels
    np.testing.assert_array_equal(labels.classes, [0, 1])
    assert labels.corners is not None
    assert labels.difficult is not None
    np.testing.assert_allclose(labels.corners[0], [[0.1, 0.1], [0.6, 0.1], [0.6, 0.9], [0.1, 0.9]])
    np.testing.assert_allclose(labels.boxes[1], [0.2, 0.2, 0.3, 0.4])
    np.testing.assert_array_equal(labels.difficult, [False, True])


@pytest.mark.usefixtures("progress_every_item")
def test_read_dota_long_image_check_prints_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    images, label_dir = _dota(tmp_path, {"P1": "", "P2": ""})
    read_dota(images, label_dir)
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"data: {label_dir}: reading image headers: 1/2, ")


def test_read_dota_names_none_collects_sorted_names(tmp_path: Path) -> None:
    rows = "1 1 9 1 9 9 1 9 zebra 0\n1 1 9 1 9 9 1 9 ant\n"
    dataset = read_dota(*_dota(tmp_path, {"P1": rows, "P2": ""}), names=None)
    assert dataset.names == ("ant", "zebra")
    assert [len(x) for x in dataset.labels] == [2, 0]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("1 1 9 1 9 9 1 9\n", r"8 columns; expected `x1 y1"),
        ("1 1 9 1 9 9 1 9 dragon 0\n", r"class name 'dragon' is not in names"),
        ("1 1 9 1 9 9 1 9 plane 2\n", r"difficult flag '2' must be 0 or 1"),
        ("1 1 190 1 9 9 1 9 plane 0\n", r"corner coordinate 190\.0 px is not finite or outside"),
        ("1 1 a 1 9 9 1 9 plane 0\n", r"corner values .* are not all numbers"),
    ],
)
def test_read_dota_bad_row_names_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    with pytest.raises(LabelFormatError, match=rf"P1\.txt:3: {message}"):
        read_dota(*_dota(tmp_path, {"P1": HEADER + row}))


def test_read_dota_skip_keeps_good_images(tmp_path: Path) -> None:
    folders = _dota(tmp_path, {"P1": "1 1 9 1 9 9 1 9 plane 0\n", "P2": "1 1 9 plane\n"})
    with pytest.warns(DataWarning) as record:
        dataset = read_dota(*folders, policy="skip")
    assert [x.image_path.stem for x in dataset.labels] == ["P1"]
    assert "P2.txt:1: 4 columns" in str(record[0].message)
    assert "skipped 1 image(s)" in str(record[1].message)
