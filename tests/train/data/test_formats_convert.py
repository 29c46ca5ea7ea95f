"""Ultralytics ⇄ COCO conversion round-trips, and the json is valid for a COCO evaluator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from faster_coco_eval import COCO

from lucid_yolo.train.data.dataset_yaml import Task, load_dataset_yaml
from lucid_yolo.train.data.errors import DatasetConfigError
from lucid_yolo.train.data.formats import (
    coco_to_ultralytics,
    keypoint_names_from_flip,
    load_split,
    ultralytics_to_coco,
)
from lucid_yolo.train.data.synthetic import generate_synthetic


@pytest.mark.parametrize("task", ["detect", "segment", "pose"])
def test_ultralytics_coco_ultralytics_round_trip(tmp_path: Path, task: Task) -> None:
    data_yaml = generate_synthetic(tmp_path / "src", task=task, num_train=2, num_val=1, imgsz=96)
    written = ultralytics_to_coco(data_yaml, tmp_path / "coco")
    back = load_dataset_yaml(coco_to_ultralytics(written, tmp_path / "back", task=task))
    spec = load_dataset_yaml(data_yaml)
    assert back.names == spec.names
    assert back.kpt_shape == spec.kpt_shape
    assert back.flip_idx == spec.flip_idx
    for split in ("train", "val"):
        for a, b in zip(load_split(spec, split), load_split(back, split), strict=True):
            assert a.image_path.name == b.image_path.name
            np.testing.assert_array_equal(a.classes, b.classes)
            np.testing.assert_allclose(a.boxes, b.boxes, atol=2e-5)
            for p, q in zip(a.polygons or [], b.polygons or [], strict=True):
                np.testing.assert_allclose(p, q, atol=2e-5)
            if task == "pose":
                np.testing.assert_allclose(a.keypoints, b.keypoints, atol=2e-5)  # type: ignore[arg-type]


def test_ultralytics_to_coco_json_loads_in_faster_coco_eval(tmp_path: Path) -> None:
    data_yaml = generate_synthetic(tmp_path, task="segment", num_train=2, num_val=1, imgsz=96)
    json_path, images_dir = ultralytics_to_coco(data_yaml, tmp_path / "coco")["train"]
    coco = COCO(str(json_path))
    spec = load_dataset_yaml(data_yaml)
    assert len(coco.getAnnIds()) == sum(len(x) for x in load_split(spec, "train"))
    assert images_dir == spec.root / "images" / "train"
    assert all(coco.annToMask(a).any() for a in coco.loadAnns(coco.getAnnIds()))


def test_ultralytics_to_coco_refuses_obb(tmp_path: Path) -> None:
    data_yaml = generate_synthetic(tmp_path, task="obb", num_train=1, num_val=1, imgsz=96)
    with pytest.raises(DatasetConfigError, match=r"data\.yaml: COCO json has no oriented boxes"):
        ultralytics_to_coco(data_yaml, tmp_path / "coco")


def test_coco_to_ultralytics_needs_train_and_val(tmp_path: Path) -> None:
    with pytest.raises(DatasetConfigError, match=r"lack \['val'\]; pass both train and val"):
        coco_to_ultralytics({"train": (tmp_path / "a.json", tmp_path)}, tmp_path / "out")


def test_keypoint_names_from_flip_encodes_pairs() -> None:
    assert keypoint_names_from_flip((0, 3, 2, 1)) == ("kpt_0", "left_1", "kpt_2", "right_1")
