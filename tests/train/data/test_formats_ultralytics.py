"""Ultralytics split reading: every task's rows, the path rules and every bad input."""

from __future__ import annotations

import re
from pathlib import Path

import cv2
import numpy as np
import pytest

from lucid_yolo.train.data.dataset_yaml import DatasetSpec, Task, load_dataset_yaml
from lucid_yolo.train.data.errors import (
    DatasetConfigError,
    DataWarning,
    ImageReadError,
    LabelFormatError,
)
from lucid_yolo.train.data.formats import label_path_for, load_split


def _image(path: Path, height: int = 32, width: int = 48) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), np.full((height, width, 3), 127, np.uint8))
    return path


def _dataset(
    root: Path, labels: dict[str, str], task: Task = "detect", extra: str = ""
) -> DatasetSpec:
    """A dataset whose train split has one image per entry of ``labels`` (stem → file text)."""
    for stem, text in labels.items():
        _image(root / "images" / "train" / f"{stem}.png")
        label = root / "labels" / "train" / f"{stem}.txt"
        label.parent.mkdir(parents=True, exist_ok=True)
        label.write_text(text)
    (root / "images" / "val").mkdir(parents=True, exist_ok=True)
    yaml_path = root / "data.yaml"
    yaml_path.write_text(f"train: images/train\nval: images/val\nnames: [a, b, c]\n{extra}")
    return load_dataset_yaml(yaml_path, task=task)


def test_label_path_for_replaces_last_images_folder() -> None:
    path = Path("/d/images/x/images/train/a.jpg")
    assert label_path_for(path) == Path("/d/images/x/labels/train/a.txt")


def test_label_path_for_without_images_folder_is_sibling() -> None:
    assert label_path_for(Path("/d/train/a.jpg")) == Path("/d/train/a.txt")


def test_load_split_detect_rows_become_normalised_xyxy(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "1 0.5 0.5 0.2 0.4\n\n2 0.25 0.25 0.1 0.1\n"})
    (labels,) = load_split(spec, "train")
    np.testing.assert_array_equal(labels.classes, [1, 2])
    np.testing.assert_allclose(labels.boxes, [[0.4, 0.3, 0.6, 0.7], [0.2, 0.2, 0.3, 0.3]])
    assert labels.polygons is None
    assert labels.keypoints is None
    assert labels.corners is None


def test_load_split_detect_accepts_polygon_rows_as_hulls(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "0 0.1 0.2 0.5 0.2 0.3 0.6 0.1 0.5\n"})
    (labels,) = load_split(spec, "train")
    np.testing.assert_allclose(labels.boxes, [[0.1, 0.2, 0.5, 0.6]])


def test_load_split_detect_seven_columns_read_as_triangle_with_warning(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "0 0.1 0.2 0.5 0.2 0.3 0.6\n"})
    with pytest.warns(DataWarning, match=r"a\.txt:1: 7 columns are read as a triangle"):
        (labels,) = load_split(spec, "train")
    np.testing.assert_allclose(labels.boxes, [[0.1, 0.2, 0.5, 0.6]])


def test_load_split_duplicate_row_warns_and_keeps_both(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "0 0.5 0.5 0.2 0.2\n1 0.3 0.3 0.1 0.1\n0 0.50 0.5 0.2 0.2\n"})
    with pytest.warns(DataWarning, match=r"a\.txt:3: repeats line 1 exactly"):
        (labels,) = load_split(spec, "train")
    assert len(labels) == 3


def test_load_split_tiny_image_with_boxes_warns(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "0 0.5 0.5 0.5 0.5\n"})
    _image(tmp_path / "images" / "train" / "a.png", height=1, width=1)
    with pytest.warns(DataWarning, match=r"a\.png: is 1x1 px but has 1 instance\(s\)"):
        (labels,) = load_split(spec, "train")
    assert len(labels) == 1


def test_load_split_no_label_file_in_split_is_an_error(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "0 0.5 0.5 0.2 0.2\n", "b": ""})
    for label in (tmp_path / "labels" / "train").iterdir():
        label.unlink()
    with pytest.raises(DatasetConfigError, match=r"split 'train' .* has no label file for any"):
        load_split(spec, "train", policy="skip")


def test_load_split_no_label_file_allowed_when_asked(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "0 0.5 0.5 0.2 0.2\n"})
    (tmp_path / "labels" / "train" / "a.txt").unlink()
    (labels,) = load_split(spec, "train", allow_unlabelled=True)
    assert len(labels) == 0


def test_load_split_empty_split_is_an_error(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "0 0.5 0.5 0.2 0.2\n"})
    with pytest.raises(DatasetConfigError, match=r"split 'val' .* holds no image"):
        load_split(spec, "val", allow_unlabelled=True)


def test_load_split_every_image_skipped_is_an_error(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "0 0.5 0.5 0.2\n"})
    with (
        pytest.warns(DataWarning),
        pytest.raises(DatasetConfigError, match=r"every image of split 'train' was skipped"),
    ):
        load_split(spec, "train", policy="skip")


def test_load_split_segment_box_is_polygon_hull(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "2 0.1 0.2 0.5 0.2 0.5 0.9 0.1 0.8\n"}, task="segment")
    (labels,) = load_split(spec, "train")
    assert labels.polygons is not None
    np.testing.assert_allclose(labels.polygons[0], [[0.1, 0.2], [0.5, 0.2], [0.5, 0.9], [0.1, 0.8]])
    np.testing.assert_allclose(labels.boxes, [[0.1, 0.2, 0.5, 0.9]])


def test_load_split_pose_unlabelled_keypoint_is_zeroed(tmp_path: Path) -> None:
    row = "0 0.5 0.5 0.4 0.4 0.4 0.4 2 0.9 0.9 0 0.6 0.6 1\n"
    spec = _dataset(tmp_path, {"a": row}, task="pose", extra="kpt_shape: [3, 3]\n")
    (labels,) = load_split(spec, "train")
    assert labels.keypoints is not None
    np.testing.assert_allclose(labels.keypoints[0], [[0.4, 0.4, 2], [0, 0, 0], [0.6, 0.6, 1]])


def test_load_split_pose_two_dims_origin_means_unlabelled(tmp_path: Path) -> None:
    row = "0 0.5 0.5 0.4 0.4 0.4 0.4 0 0\n"
    spec = _dataset(tmp_path, {"a": row}, task="pose", extra="kpt_shape: [2, 2]\n")
    (labels,) = load_split(spec, "train")
    assert labels.keypoints is not None
    np.testing.assert_allclose(labels.keypoints[0], [[0.4, 0.4, 2], [0, 0, 0]])


def test_load_split_obb_keeps_corners_and_clips_hull(tmp_path: Path) -> None:
    row = "1 0.5 -0.005 0.9 0.4 0.5 0.8 0.1 0.4\n"
    spec = _dataset(tmp_path, {"a": row}, task="obb")
    (labels,) = load_split(spec, "train")
    assert labels.corners is not None
    assert labels.difficult is not None
    np.testing.assert_allclose(labels.corners[0, 0], [0.5, -0.005])
    np.testing.assert_allclose(labels.boxes, [[0.1, 0.0, 0.9, 0.8]])
    assert not labels.difficult.any()


def test_load_split_missing_label_file_is_background(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "", "b": "0 0.5 0.5 0.2 0.2\n"})
    (tmp_path / "labels" / "train" / "a.txt").unlink()
    labels, _ = load_split(spec, "train")
    assert len(labels) == 0
    assert labels.boxes.shape == (0, 4)


def test_load_split_empty_label_file_is_background_with_task_fields(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "\n"}, task="pose", extra="kpt_shape: [4, 3]\n")
    (labels,) = load_split(spec, "train")
    assert labels.keypoints is not None
    assert labels.keypoints.shape == (0, 4, 3)


@pytest.mark.usefixtures("progress_every_item")
def test_load_split_long_scan_prints_progress_with_time_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _dataset(tmp_path, dict.fromkeys("abc", "0 0.5 0.5 0.2 0.2\n"))
    load_split(spec, "train")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "data: train: reading labels and image headers: 1/3",
        "data: train: reading labels and image headers: 2/3",
    ]
    assert all(re.search(r", \d+:\d\d elapsed, about \d+:\d\d left$", line) for line in lines)


def test_load_split_image_list_resolves_against_list_folder(tmp_path: Path) -> None:
    _dataset(tmp_path, {"a": "0 0.5 0.5 0.1 0.1\n", "b": ""})
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "train.txt").write_text("../images/train/b.png\n# note\n")
    (tmp_path / "data.yaml").write_text("train: lists/train.txt\nval: images/val\nnames: [a]\n")
    (labels,) = load_split(load_dataset_yaml(tmp_path / "data.yaml"), "train")
    assert labels.image_path == (tmp_path / "images" / "train" / "b.png").resolve()


def test_load_split_list_of_folders_concatenates(tmp_path: Path) -> None:
    _dataset(tmp_path, {"a": ""})
    _image(tmp_path / "images" / "extra" / "z.png")
    (tmp_path / "data.yaml").write_text(
        "train: [images/train, images/extra]\nval: images/val\nnames: [a]\n"
    )
    labels = load_split(load_dataset_yaml(tmp_path / "data.yaml"), "train")
    assert [x.image_path.name for x in labels] == ["a.png", "z.png"]


def test_load_split_clips_coordinates_within_tolerance(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "0 0.1 0.5 0.205 0.2\n"})
    (labels,) = load_split(spec, "train")
    assert labels.boxes[0, 0] == 0.0


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("0 0.5 0.5 0.2\n", r"4 columns do not fit a detect row"),
        ("3 0.5 0.5 0.2 0.2\n", r"class id '3' is out of range"),
        ("x 0.5 0.5 0.2 0.2\n", r"class id 'x' is not a number"),
        ("0 0.5 nan 0.2 0.2\n", r"box edge value nan is not finite"),
        ("0 0.5 0.5 1.5 0.2\n", r"box edge value -0.25 is not finite or outside \[0, 1\]"),
        ("0 0.5 0.5 0 0.2\n", r"box size 0 x 0\.2 is not positive"),
    ],
)
def test_load_split_bad_detect_row_names_file_line_and_value(
    tmp_path: Path, row: str, message: str
) -> None:
    spec = _dataset(tmp_path, {"a": "0 0.5 0.5 0.1 0.1\n" + row})
    with pytest.raises(LabelFormatError, match=rf"labels/train/a\.txt:2: {message}"):
        load_split(spec, "train")


def test_load_split_bad_segment_row_count(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "0 0.1 0.1 0.2 0.2\n"}, task="segment")
    with pytest.raises(LabelFormatError, match=r"a\.txt:1: 5 columns do not fit a segment row"):
        load_split(spec, "train")


def test_load_split_bad_pose_row_count_names_kpt_shape(tmp_path: Path) -> None:
    spec = _dataset(
        tmp_path, {"a": "0 0.5 0.5 0.1 0.1 0.5 0.5\n"}, task="pose", extra="kpt_shape: [1, 3]\n"
    )
    with pytest.raises(LabelFormatError, match=r"a\.txt:1: .*kpt_shape \[1, 3\]"):
        load_split(spec, "train")


def test_load_split_bad_keypoint_visibility(tmp_path: Path) -> None:
    spec = _dataset(
        tmp_path, {"a": "0 0.5 0.5 0.1 0.1 0.5 0.5 3\n"}, task="pose", extra="kpt_shape: [1, 3]\n"
    )
    with pytest.raises(LabelFormatError, match=r"a\.txt:1: keypoint visibility \[3\] must"):
        load_split(spec, "train")


def test_load_split_obb_corner_out_of_range(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": "0 0.1 0.1 0.9 0.1 0.9 1.2 0.1 0.9\n"}, task="obb")
    with pytest.raises(LabelFormatError, match=r"a\.txt:1: corner value 1\.2"):
        load_split(spec, "train")


def test_load_split_missing_listed_image_names_list_line(tmp_path: Path) -> None:
    _dataset(tmp_path, {"a": ""})
    (tmp_path / "train.txt").write_text("images/train/a.png\nimages/train/gone.png\n")
    (tmp_path / "data.yaml").write_text("train: train.txt\nval: images/val\nnames: [a]\n")
    spec = load_dataset_yaml(tmp_path / "data.yaml")
    with pytest.raises(ImageReadError, match=r"train\.txt:2: image 'images/train/gone\.png'"):
        load_split(spec, "train")


def test_load_split_truncated_image_fails(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": ""})
    image = tmp_path / "images" / "train" / "a.png"
    image.write_bytes(image.read_bytes()[:-20])
    with pytest.raises(ImageReadError, match=r"a\.png: PNG end chunk IEND missing"):
        load_split(spec, "train")


def test_load_split_unchecked_images_are_trusted(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": ""})
    (tmp_path / "images" / "train" / "a.png").write_bytes(b"")
    assert len(load_split(spec, "train", check_images=False)) == 1


def test_load_split_skip_drops_bad_images_warns_per_file_and_counts(tmp_path: Path) -> None:
    spec = _dataset(
        tmp_path,
        {
            "a": "0 0.5 0.5 0.1 0.1\n",
            "b": "9 0.5 0.5 0.1 0.1\n0 0.5 0.5 0.1\n",
            "c": "0 0.5 0.5 0.1 0.1\n",
        },
    )
    (tmp_path / "images" / "train" / "c.png").write_bytes(b"not an image")
    with pytest.warns(DataWarning) as record:
        labels = load_split(spec, "train", policy="skip")
    assert [x.image_path.name for x in labels] == ["a.png"]
    messages = [str(w.message) for w in record]
    assert len(messages) == 3
    assert "b.txt:1: class id '9'" in messages[0]
    assert "c.png: content is not a PNG image" in messages[1]
    assert "skipped 2 image(s) because of 3 problem(s) in 2 file(s)" in messages[2]


def test_load_split_binary_label_file_is_reported(tmp_path: Path) -> None:
    spec = _dataset(tmp_path, {"a": ""})
    (tmp_path / "labels" / "train" / "a.txt").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(LabelFormatError, match=r"a\.txt: cannot read it as UTF-8 text"):
        load_split(spec, "train")
