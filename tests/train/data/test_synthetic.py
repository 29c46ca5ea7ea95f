"""Synthetic generator: determinism, every task's layout, and labels that match the pixels."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from lucid_yolo.train.data.dataset_yaml import TASKS, Task, load_dataset_yaml
from lucid_yolo.train.data.formats import load_split
from lucid_yolo.train.data.synthetic import generate_synthetic, render_sample
from lucid_yolo.train.data.synthetic_shapes import SHAPE_CLASSES


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "data.yaml"
    }


def test_generate_synthetic_same_seed_same_bytes(tmp_path: Path) -> None:
    first = generate_synthetic(tmp_path / "a", task="segment", num_train=3, num_val=1, imgsz=96)
    second = generate_synthetic(tmp_path / "b", task="segment", num_train=3, num_val=1, imgsz=96)
    assert _files(first.parent) == _files(second.parent)
    assert len(_files(first.parent)) == 8


def test_generate_synthetic_other_seed_other_images(tmp_path: Path) -> None:
    first = generate_synthetic(tmp_path / "a", num_train=1, num_val=0, imgsz=96, seed=0)
    second = generate_synthetic(tmp_path / "b", num_train=1, num_val=0, imgsz=96, seed=1)
    assert _files(first.parent) != _files(second.parent)


def test_generate_synthetic_prefix_stable_when_growing(tmp_path: Path) -> None:
    small = generate_synthetic(tmp_path / "a", num_train=1, num_val=0, imgsz=96)
    large = generate_synthetic(tmp_path / "b", num_train=3, num_val=0, imgsz=96)
    name = "labels/train/000000.txt"
    assert _files(small.parent)[name] == _files(large.parent)[name]


@pytest.mark.parametrize("task", TASKS)
def test_generate_synthetic_loads_with_task_fields(tmp_path: Path, task: Task) -> None:
    data_yaml = generate_synthetic(tmp_path, task=task, num_train=2, num_val=1, imgsz=128)
    spec = load_dataset_yaml(data_yaml)
    train = load_split(spec, "train")
    assert spec.task == task
    assert spec.names == tuple(c.name for c in SHAPE_CLASSES)
    assert len(train) == 2
    assert len(load_split(spec, "val")) == 1
    assert all(len(x) >= 1 for x in train)
    assert (train[0].polygons is not None) == (task == "segment")
    assert (train[0].keypoints is not None) == (task == "pose")
    assert (train[0].corners is not None) == (task == "obb")
    if task == "pose":
        assert spec.kpt_shape == (5, 3)
        assert spec.flip_idx == (0, 3, 2, 1, 4)


def _colour_mask(image: np.ndarray, cls: int) -> np.ndarray:
    colour = np.asarray(SHAPE_CLASSES[cls].colour, np.float32)
    return np.abs(image.astype(np.float32) - colour).max(axis=-1) < 40


def _raster(polygon: np.ndarray, size: int) -> np.ndarray:
    """Pixels whose centre (i + 0.5) lies inside a normalised polygon."""
    drawn = np.zeros((size, size), np.uint8)
    cv2.fillPoly(drawn, [np.round((polygon * size - 0.5) * 16).astype(np.int32)], 1, cv2.LINE_8, 4)
    return drawn > 0


def test_render_sample_polygons_are_exactly_the_coloured_pixels() -> None:
    size = 256
    for seed in range(4):
        rng = np.random.default_rng(seed)
        image, labels = render_sample(
            rng, task="segment", imgsz=size, max_objects=4, image_path=Path("x.png")
        )
        assert labels.polygons is not None
        for cls, polygon in zip(labels.classes, labels.polygons, strict=True):
            drawn = _raster(polygon, size)
            near = cv2.dilate(drawn.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
            np.testing.assert_array_equal(_colour_mask(image, int(cls)) & near, drawn)


def test_render_sample_boxes_fit_their_shape_pixels() -> None:
    size = 256
    for seed in range(8):
        rng = np.random.default_rng(seed)
        image, labels = render_sample(
            rng, task="detect", imgsz=size, max_objects=1, image_path=Path("x")
        )
        ((x1, y1, x2, y2),) = (labels.boxes * size).tolist()
        rows, cols = np.nonzero(_colour_mask(image, int(labels.classes[0])))
        # Pixel centres (i + 0.5) of the drawn shape lie within half a pixel of the box's edges
        # (OpenCV rounds to the nearest scan line), plus its 1/16 px fixed-point rounding.
        tol = 0.5 + 1 / 16
        np.testing.assert_allclose([cols.min() + 0.5, rows.min() + 0.5], [x1, y1], atol=tol)
        np.testing.assert_allclose([cols.max() + 0.5, rows.max() + 0.5], [x2, y2], atol=tol)


def test_render_sample_obb_corners_contain_the_shape() -> None:
    rng = np.random.default_rng(3)
    size = 256
    image, labels = render_sample(rng, task="obb", imgsz=size, max_objects=3, image_path=Path("x"))
    assert labels.corners is not None
    for cls, corners in zip(labels.classes, labels.corners, strict=True):
        region = np.zeros((size, size), np.uint8)
        region = _raster(corners, size)
        near = cv2.dilate(region.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
        shape_pixels = _colour_mask(image, int(cls)) & near
        assert shape_pixels.sum() > 20
        edge = cv2.dilate(region.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
        assert not (shape_pixels & ~edge).any()
        side = np.linalg.norm(corners[1] - corners[0]) / np.linalg.norm(corners[2] - corners[1])
        assert max(side, 1 / side) >= 1.4


def test_render_sample_obb_corners_stay_inside_the_image() -> None:
    rng = np.random.default_rng(0)
    size = 128
    corners = [
        render_sample(rng, task="obb", imgsz=size, max_objects=8, image_path=Path("x"))[1].corners
        for _ in range(300)
    ]
    every = np.concatenate([c for c in corners if c is not None])
    assert len(every) > 300
    assert every.min() >= 0.0
    assert every.max() <= 1.0


def test_render_sample_pose_keypoints_sit_on_the_shape() -> None:
    rng = np.random.default_rng(5)
    size = 256
    image, labels = render_sample(rng, task="pose", imgsz=size, max_objects=3, image_path=Path("x"))
    assert labels.keypoints is not None
    for cls, keypoints in zip(labels.classes, labels.keypoints, strict=True):
        colour = cv2.dilate(_colour_mask(image, int(cls)).astype(np.uint8), np.ones((5, 5)))
        for x, y, v in keypoints:
            assert v == 2
            assert colour[int(y * size), int(x * size)]


def test_generate_synthetic_rejects_unknown_task(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"task 'keypoints' is unknown"):
        generate_synthetic(tmp_path, task="keypoints")  # type: ignore[arg-type]


def test_generate_synthetic_rejects_tiny_images(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"need imgsz >= 64.*got 32"):
        generate_synthetic(tmp_path, imgsz=32)


def test_generate_synthetic_smaller_rerun_removes_stale_files(tmp_path: Path) -> None:
    generate_synthetic(tmp_path, num_train=3, num_val=1, imgsz=64)
    (tmp_path / "images" / "train" / "notes.md").write_text("mine")
    generate_synthetic(tmp_path, num_train=1, num_val=1, imgsz=64, image_suffix=".png")
    assert sorted(p.name for p in (tmp_path / "images" / "train").iterdir()) == [
        "000000.png",
        "notes.md",
    ]
    assert [p.name for p in (tmp_path / "labels" / "train").iterdir()] == ["000000.txt"]
