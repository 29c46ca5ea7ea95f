"""check_dataset: every problem listed with its location, per format, without raising."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from lucid_yolo.train.data.check import check_dataset
from lucid_yolo.train.data.synthetic import generate_synthetic


def test_check_dataset_clean_synthetic_set(tmp_path: Path) -> None:
    data_yaml = generate_synthetic(tmp_path, task="pose", num_train=3, num_val=2, imgsz=96)
    report = check_dataset(data_yaml)
    assert report.ok
    assert report.task == "pose"
    assert [(s.split, s.images, s.skipped) for s in report.splits] == [
        ("train", 3, 0),
        ("val", 2, 0),
    ]
    assert report.format().endswith("no problems")


def test_check_dataset_lists_every_problem_with_location(tmp_path: Path) -> None:
    data_yaml = generate_synthetic(tmp_path, num_train=3, num_val=1, imgsz=96)
    (tmp_path / "labels" / "train" / "000000.txt").write_text("0 0.5 0.5 0.1\n7 0.5 0.5 0.1 0.1\n")
    (tmp_path / "labels" / "val" / "000000.txt").write_text("0 0.5 0.5 2 0.1\n")
    (tmp_path / "images" / "train" / "000001.jpg").write_bytes(b"")
    report = check_dataset(data_yaml)
    located = [p.location.removeprefix(str(tmp_path) + "/") for p in report.problems]
    assert located == [
        "labels/train/000000.txt:1",
        "labels/train/000000.txt:2",
        "images/train/000001.jpg",
        "labels/val/000000.txt:1",
    ]
    assert [s.skipped for s in report.splits] == [2, 1]
    assert "4 error(s)" in report.format()


def test_check_dataset_reports_yaml_problem_instead_of_raising(tmp_path: Path) -> None:
    (tmp_path / "data.yaml").write_text("train: images/train\nval: images/val\n")
    report = check_dataset(tmp_path / "data.yaml")
    (problem,) = report.problems
    assert problem.kind == "config"
    assert "no `names`" in str(problem)


def test_check_dataset_coco_json(tmp_path: Path) -> None:
    cv2.imwrite(str(tmp_path / "a.png"), np.zeros((10, 10, 3), np.uint8))
    document = {
        "images": [{"id": 1, "file_name": "a.png", "width": 10, "height": 10}],
        "annotations": [{"id": 4, "image_id": 1, "category_id": 2, "bbox": [1, 1, 2, 2]}],
        "categories": [{"id": 1, "name": "x"}],
    }
    (tmp_path / "ann.json").write_text(json.dumps(document))
    report = check_dataset(tmp_path / "ann.json", images_dir=tmp_path)
    (problem,) = report.problems
    assert "annotation id 4" in str(problem)
    assert "category_id 2" in str(problem)


def test_check_dataset_dota_folder(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "labelTxt").mkdir()
    cv2.imwrite(str(tmp_path / "images" / "P1.png"), np.zeros((10, 10, 3), np.uint8))
    (tmp_path / "labelTxt" / "P1.txt").write_text("1 1 9 1 9 9 1 9 car 0\n1 1 9 1 car\n")
    report = check_dataset(tmp_path)
    assert report.task == "obb"
    (problem,) = report.problems
    assert problem.location.endswith("P1.txt:2")


def test_check_dataset_unknown_source(tmp_path: Path) -> None:
    report = check_dataset(tmp_path)
    assert "not a dataset YAML, a COCO json or a DOTA folder" in str(report.problems[0])
