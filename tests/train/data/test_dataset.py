"""YoloDataset: determinism, tasks, overflow accounting, close-mosaic."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lucid_yolo.train.data.augment import AugmentConfig
from lucid_yolo.train.data.cache import ImageCache
from lucid_yolo.train.data.counters import DataCounters
from lucid_yolo.train.data.dataset import InstanceOverflowWarning, YoloDataset
from lucid_yolo.train.data.dataset_yaml import Task, load_dataset_yaml
from lucid_yolo.train.data.formats.ultralytics import load_split
from lucid_yolo.train.data.labels import ImageLabels
from lucid_yolo.train.data.synthetic import generate_synthetic

IMGSZ = 96


def _labels(root: Path, task: Task, n: int = 6) -> tuple[list[ImageLabels], int]:
    spec = load_dataset_yaml(
        generate_synthetic(root, task=task, num_train=n, num_val=0, imgsz=IMGSZ, max_objects=4)
    )
    k = 0 if spec.kpt_shape is None else spec.kpt_shape[0]
    return load_split(spec, "train"), k


def _dataset(labels: list[ImageLabels], task: Task, k: int = 0, **kwargs: object) -> YoloDataset:
    return YoloDataset(
        labels,
        task=task,
        imgsz=IMGSZ,
        num_keypoints=k,
        flip_idx=list(range(k)) if k else None,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_dataset_augmented_sample_per_task(tmp_path: Path, task: Task) -> None:
    labels, k = _labels(tmp_path, task)
    dataset = _dataset(labels, task, k, augment=AugmentConfig(mixup=0.5, copy_paste=0.5))
    targets = dataset[(0, 1)]
    assert targets.image.shape == (3, IMGSZ, IMGSZ)
    assert targets.valid.sum() > 0
    assert (targets.masks is not None) == (task == "segment")
    assert (targets.keypoints is not None) == (task == "pose")
    assert (targets.rboxes is not None) == (task == "obb")


def test_dataset_deterministic_per_epoch_and_index(tmp_path: Path) -> None:
    labels, _ = _labels(tmp_path, "detect")
    first = _dataset(labels, "detect", augment=AugmentConfig(mixup=0.5), seed=3)
    second = _dataset(labels, "detect", augment=AugmentConfig(mixup=0.5), seed=3)
    a, b = first[(2, 4)], second[(2, 4)]
    np.testing.assert_array_equal(a.image, b.image)
    np.testing.assert_array_equal(a.boxes, b.boxes)
    assert not np.array_equal(a.image, first[(3, 4)].image)


def test_dataset_validation_is_letterbox_of_source(tmp_path: Path) -> None:
    labels, _ = _labels(tmp_path, "detect")
    targets = _dataset(labels, "detect")[0]
    n = int(targets.valid.sum())
    np.testing.assert_allclose(targets.boxes[:n] / IMGSZ, labels[0].boxes, atol=1e-5)
    assert targets.scale_pad == (1.0, 0.0, 0.0)


def test_dataset_overflow_counted_and_warned_once(tmp_path: Path) -> None:
    labels, _ = _labels(tmp_path, "detect")
    counters = DataCounters(workers=0)
    dataset = _dataset(labels, "detect", max_instances=1, counters=counters)
    expected = sum(max(0, len(item) - 1) for item in labels)
    with pytest.warns(InstanceOverflowWarning, match="max_instances=1") as record:
        [dataset[i] for i in range(len(dataset))]
    assert len(record) == 1
    assert counters.totals()["overflow"] == expected > 0
    assert counters.totals()["samples"] == len(labels)


def test_dataset_close_mosaic_turns_mosaic_off(tmp_path: Path) -> None:
    labels, _ = _labels(tmp_path, "detect")
    dataset = _dataset(labels, "detect", augment=AugmentConfig.off(), close_mosaic_epoch=2)
    assert dataset.mosaic_enabled(1)
    assert not dataset.mosaic_enabled(2)
    mosaic_only = AugmentConfig(hsv_h=0, hsv_s=0, hsv_v=0, translate=0, scale=0, fliplr=0)
    dataset.augment = mosaic_only
    unaugmented = _dataset(labels, "detect")[0]
    np.testing.assert_array_equal(dataset[(2, 0)].image, unaugmented.image)
    assert not np.array_equal(dataset[(1, 0)].image, unaugmented.image)


def test_dataset_reads_from_cache(tmp_path: Path) -> None:
    labels, _ = _labels(tmp_path, "detect")
    cache = ImageCache(IMGSZ, max_bytes=10**8)
    dataset = _dataset(labels, "detect", cache=cache)
    dataset[0]
    assert len(cache) == 1
    labels[0].image_path.unlink()
    assert dataset[0].image.shape == (3, IMGSZ, IMGSZ)


def test_dataset_pose_flip_needs_flip_idx(tmp_path: Path) -> None:
    labels, k = _labels(tmp_path, "pose")
    with pytest.raises(ValueError, match="needs flip_idx"):
        YoloDataset(labels, task="pose", num_keypoints=k, augment=AugmentConfig())


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_dataset_heavy_augmentation_keeps_targets_valid(tmp_path: Path, task: Task) -> None:
    labels, k = _labels(tmp_path, task)
    strong = AugmentConfig(degrees=180, shear=10, mixup=0.5, copy_paste=0.5)
    dataset = _dataset(labels, task, k, augment=strong, max_instances=64)
    for epoch in range(3):
        for index in range(len(dataset)):
            t = dataset[(epoch, index)]
            boxes = t.boxes[t.valid]
            assert np.isfinite(t.boxes).all()
            assert (boxes[:, 2:] > boxes[:, :2]).all()
            assert (boxes >= 0).all()
            assert (boxes <= IMGSZ).all()
            if t.rboxes is not None:
                r = t.rboxes[t.valid]
                assert (r[:, 2] >= r[:, 3]).all()
                assert (r[:, 4] >= np.float32(-np.pi / 4)).all()
                assert (r[:, 4] < 3 * np.pi / 4).all()
            if t.keypoints is not None:
                xy, seen = t.keypoints[..., :2], t.keypoints[..., 2] > 0
                assert ((xy >= 0) & (xy <= IMGSZ)).all(axis=-1)[seen].all()


def test_dataset_validation_segment_carries_source_shapes(tmp_path: Path) -> None:
    labels, _ = _labels(tmp_path, "segment")
    targets = _dataset(labels, "segment")[0]
    assert labels[0].polygons is not None
    assert targets.source_shapes is not None
    assert len(targets.source_shapes) == int(targets.valid.sum())
    height, width = targets.orig_size
    for polygon, label in zip(targets.source_shapes, labels[0].polygons, strict=True):
        assert polygon.dtype == np.float64
        np.testing.assert_allclose(polygon, label * [width, height])


def test_dataset_training_segment_has_no_source_shapes(tmp_path: Path) -> None:
    labels, _ = _labels(tmp_path, "segment")
    assert _dataset(labels, "segment", augment=AugmentConfig())[0].source_shapes is None


def _all_flagged(labels: list[ImageLabels]) -> list[ImageLabels]:
    return [replace(x, difficult=np.ones(len(x), dtype=np.bool_)) for x in labels]


@pytest.mark.parametrize("task", ["detect", "segment"])
def test_dataset_training_samples_leave_coco_crowds_out(tmp_path: Path, task: Task) -> None:
    labels, _ = _labels(tmp_path, task)
    crowds = _all_flagged(labels)
    trained = _dataset(crowds, task, augment=AugmentConfig())
    assert all(not trained[(0, i)].valid.any() for i in range(len(crowds)))
    evaluated = _dataset(crowds, task)[0]
    assert int(evaluated.valid.sum()) == len(crowds[0]) > 0
    assert evaluated.ignore[evaluated.valid].all()


def test_dataset_training_samples_keep_dota_difficult_instances(tmp_path: Path) -> None:
    labels, _ = _labels(tmp_path, "obb")
    targets = _dataset(_all_flagged(labels), "obb", augment=AugmentConfig())[(0, 0)]
    assert targets.valid.any()
    assert targets.ignore[targets.valid].all()
