"""COCO json reading: boxes, category remapping, polygons, RLE, keypoints, crowds, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from lucid_yolo.train.data.errors import (
    DatasetConfigError,
    DataWarning,
    ImageReadError,
    LabelFormatError,
)
from lucid_yolo.train.data.formats import flip_idx_from_names, read_coco
from lucid_yolo.train.geometry import polygon_mask, rle_encode

WIDTH, HEIGHT = 40, 20


def _coco(tmp_path: Path, annotations: list[dict[str, Any]], **extra: Any) -> Path:
    images_dir = tmp_path / "imgs"
    images_dir.mkdir(exist_ok=True)
    images = []
    for image_id, name in ((1, "a.png"), (2, "b.png")):
        cv2.imwrite(str(images_dir / name), np.zeros((HEIGHT, WIDTH, 3), np.uint8))
        images.append({"id": image_id, "file_name": name, "width": WIDTH, "height": HEIGHT})
    document = {
        "images": images,
        "annotations": annotations,
        "categories": [{"id": 7, "name": "dog"}, {"id": 3, "name": "cat"}],
        **extra,
    }
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(document))
    return path


def _ann(**fields: Any) -> dict[str, Any]:
    return {"id": 11, "image_id": 1, "category_id": 7, "bbox": [4, 2, 8, 10], **fields}


def test_read_coco_boxes_normalised_and_categories_remapped(tmp_path: Path) -> None:
    dataset = read_coco(_coco(tmp_path, [_ann()]), tmp_path / "imgs")
    assert dataset.names == ("cat", "dog")
    assert dataset.category_ids == (3, 7)
    first, background = dataset.labels
    np.testing.assert_array_equal(first.classes, [1])
    np.testing.assert_allclose(first.boxes, [[0.1, 0.1, 0.3, 0.6]])
    assert len(background) == 0


def test_read_coco_multi_part_polygon_is_merged(tmp_path: Path) -> None:
    parts = [[2, 2, 8, 2, 8, 8], [20, 10, 30, 10, 30, 18]]
    dataset = read_coco(
        _coco(tmp_path, [_ann(segmentation=parts)]), tmp_path / "imgs", task="segment"
    )
    polygons = dataset.labels[0].polygons
    assert polygons is not None
    assert polygons[0].shape == (3 + 3 + 2, 2)
    np.testing.assert_allclose(polygons[0].max(axis=0), [30 / WIDTH, 18 / HEIGHT])


def test_read_coco_compressed_rle_becomes_contour_polygon(tmp_path: Path) -> None:
    mask = np.zeros((HEIGHT, WIDTH), np.uint8)
    mask[4:12, 10:30] = 1
    dataset = read_coco(
        _coco(tmp_path, [_ann(segmentation=rle_encode(mask))]), tmp_path / "imgs", task="segment"
    )
    polygons = dataset.labels[0].polygons
    assert polygons is not None
    np.testing.assert_allclose(polygons[0].min(axis=0), [10.5 / WIDTH, 4.5 / HEIGHT])
    np.testing.assert_allclose(polygons[0].max(axis=0), [29.5 / WIDTH, 11.5 / HEIGHT])


def test_read_coco_rle_is_kept_and_trained_with_its_hole(tmp_path: Path) -> None:
    ring = np.zeros((HEIGHT, WIDTH), np.uint8)
    ring[4:16, 10:30] = 1
    ring[8:12, 15:25] = 0
    polygon = _ann(id=12, segmentation=[[2, 2, 8, 2, 8, 8]])
    dataset = read_coco(
        _coco(tmp_path, [_ann(segmentation=rle_encode(ring)), polygon]),
        tmp_path / "imgs",
        task="segment",
    )
    labels = dataset.labels[0]
    assert labels.rle_masks is not None
    rle, none = labels.rle_masks
    assert none is None
    assert rle is not None
    np.testing.assert_array_equal(rle.decode(), ring)
    assert labels.polygons is not None
    np.testing.assert_allclose(labels.polygons[0].min(axis=0), [10.5 / WIDTH, 4.5 / HEIGHT])
    trained = polygon_mask(labels.polygons[0] * [WIDTH, HEIGHT], HEIGHT, WIDTH)
    assert not trained[8:12, 15:25].any(), "the training polygon carves the hole out"
    assert trained[4:7, 10:29].all()


def test_read_coco_polygons_only_hold_no_rle(tmp_path: Path) -> None:
    dataset = read_coco(
        _coco(tmp_path, [_ann(segmentation=[[2, 2, 8, 2, 8, 8]])]),
        tmp_path / "imgs",
        task="segment",
    )
    assert dataset.labels[0].rle_masks is None


def test_read_coco_crowd_dropped_and_counted(tmp_path: Path) -> None:
    crowd = _ann(id=12, iscrowd=1, segmentation={"size": [HEIGHT, WIDTH], "counts": [800]})
    dataset = read_coco(_coco(tmp_path, [_ann(), crowd]), tmp_path / "imgs")
    assert dataset.crowd_dropped == 1
    assert len(dataset.labels[0]) == 1


def test_read_coco_crowd_ignore_keeps_it_difficult(tmp_path: Path) -> None:
    counts = [HEIGHT * 10, HEIGHT * 5, HEIGHT * 25]
    crowd = _ann(id=12, iscrowd=1, segmentation={"size": [HEIGHT, WIDTH], "counts": counts})
    dataset = read_coco(
        _coco(tmp_path, [_ann(segmentation=[[4, 2, 12, 2, 12, 12]]), crowd]),
        tmp_path / "imgs",
        task="segment",
        crowd="ignore",
    )
    labels = dataset.labels[0]
    assert labels.difficult is not None
    np.testing.assert_array_equal(labels.difficult, [False, True])
    assert labels.polygons is not None
    np.testing.assert_allclose(labels.polygons[1].min(axis=0), [10.5 / WIDTH, 0.5 / HEIGHT])
    assert labels.rle_masks is not None
    assert labels.rle_masks[0] is None
    crowd_mask = labels.rle_masks[1]
    assert crowd_mask is not None
    assert crowd_mask.decode()[:, 10:15].all()
    assert crowd_mask.area == HEIGHT * 5


def test_read_coco_keypoints_and_flip_from_names(tmp_path: Path) -> None:
    categories = [{"id": 1, "name": "p", "keypoints": ["nose", "left_eye", "right_eye"]}]
    ann = _ann(category_id=1, keypoints=[20, 10, 2, 0, 0, 0, 30, 5, 1])
    dataset = read_coco(
        _coco(tmp_path, [ann], categories=categories), tmp_path / "imgs", task="pose"
    )
    assert dataset.kpt_shape == (3, 3)
    assert dataset.flip_idx == (0, 2, 1)
    keypoints = dataset.labels[0].keypoints
    assert keypoints is not None
    np.testing.assert_allclose(keypoints[0], [[0.5, 0.5, 2], [0, 0, 0], [0.75, 0.25, 1]])


@pytest.mark.usefixtures("progress_every_item")
def test_read_coco_long_image_check_prints_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    read_coco(_coco(tmp_path, [_ann()]), tmp_path / "imgs")
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("data: ann.json: reading image headers: 1/2, ")


def test_flip_idx_from_names_pairs_left_right_any_case() -> None:
    assert flip_idx_from_names(("Left_Hand", "head", "right_hand")) == (2, 1, 0)


@pytest.mark.parametrize(
    ("ann", "message"),
    [
        (_ann(category_id=9), r"category_id 9 is not in `categories` \[3, 7\]"),
        (_ann(bbox=[1, 1, 0, 4]), r"bbox \[1\.0, 1\.0, 0\.0, 4\.0\] is not \[x, y, w, h\]"),
        (_ann(bbox=[30, 1, 20, 4]), r"bbox coordinate 50\.0 px is not finite or outside the 40x20"),
        (_ann(bbox="1 2 3 4"), r"`bbox` must be a list of numbers, got '1 2 3 4'"),
        (_ann(image_id=5), r"image_id 5 is not in `images`"),
    ],
)
def test_read_coco_bad_annotation_names_json_and_id(
    tmp_path: Path, ann: dict[str, Any], message: str
) -> None:
    with pytest.raises(LabelFormatError, match=rf"ann\.json: annotation id 11.*{message}"):
        read_coco(_coco(tmp_path, [ann]), tmp_path / "imgs")


def test_read_coco_bad_rle_size(tmp_path: Path) -> None:
    ann = _ann(segmentation={"size": [5, 5], "counts": [25]})
    with pytest.raises(LabelFormatError, match=r"RLE size \[5, 5\] differs from the image's"):
        read_coco(_coco(tmp_path, [ann]), tmp_path / "imgs", task="segment")


def test_read_coco_rle_counts_not_whole_numbers(tmp_path: Path) -> None:
    ann = _ann(segmentation={"size": [HEIGHT, WIDTH], "counts": [100, "x", 600]})
    with pytest.raises(LabelFormatError, match=r"annotation id 11 .*RLE counts hold 'x'"):
        read_coco(_coco(tmp_path, [ann]), tmp_path / "imgs", task="segment")


def test_read_coco_segment_needs_segmentation(tmp_path: Path) -> None:
    with pytest.raises(LabelFormatError, match=r"segmentation None is neither polygons nor"):
        read_coco(_coco(tmp_path, [_ann()]), tmp_path / "imgs", task="segment")


def test_read_coco_wrong_keypoint_count(tmp_path: Path) -> None:
    categories = [{"id": 7, "name": "p", "keypoints": ["a", "b"]}]
    ann = _ann(keypoints=[1, 1, 2])
    with pytest.raises(LabelFormatError, match=r"3 keypoint values, expected 6"):
        read_coco(_coco(tmp_path, [ann], categories=categories), tmp_path / "imgs", task="pose")


def test_read_coco_image_size_differs_from_json(tmp_path: Path) -> None:
    path = _coco(tmp_path, [])
    cv2.imwrite(str(tmp_path / "imgs" / "b.png"), np.zeros((9, 9, 3), np.uint8))
    with pytest.raises(ImageReadError, match=r"b\.png: the image is 9x9 but ann\.json says 40x20"):
        read_coco(path, tmp_path / "imgs")


def test_read_coco_obb_task_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetConfigError, match=r"COCO json has no oriented boxes"):
        read_coco(_coco(tmp_path, []), tmp_path / "imgs", task="obb")


def test_read_coco_pose_without_keypoint_names(tmp_path: Path) -> None:
    with pytest.raises(DatasetConfigError, match=r"task 'pose' needs one keypoint list"):
        read_coco(_coco(tmp_path, []), tmp_path / "imgs", task="pose")


def test_read_coco_skip_drops_the_image_and_counts(tmp_path: Path) -> None:
    anns = [_ann(category_id=9), _ann(id=13, image_id=2)]
    with pytest.warns(DataWarning) as record:
        dataset = read_coco(_coco(tmp_path, anns), tmp_path / "imgs", policy="skip")
    assert [x.image_path.name for x in dataset.labels] == ["b.png"]
    assert "annotation id 11" in str(record[0].message)
    assert "skipped 1 image(s) because of 1 problem(s)" in str(record[-1].message)


def test_read_coco_malformed_image_entry(tmp_path: Path) -> None:
    path = _coco(tmp_path, [])
    document = json.loads(path.read_text())
    del document["images"][1]["width"]
    path.write_text(json.dumps(document))
    with pytest.raises(DatasetConfigError, match=r"ann\.json: images\[1\] is .*it needs id: int"):
        read_coco(path, tmp_path / "imgs")


def test_read_coco_repeated_category_ids(tmp_path: Path) -> None:
    categories = [{"id": 1, "name": "a"}, {"id": 1, "name": "b"}]
    with pytest.raises(DatasetConfigError, match=r"category ids \[1, 1\] repeat"):
        read_coco(_coco(tmp_path, [], categories=categories), tmp_path / "imgs")
