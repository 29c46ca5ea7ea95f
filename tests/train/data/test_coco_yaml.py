"""A COCO description YAML trains like an Ultralytics dataset."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from lucid_yolo.train.data import DatasetConfigError, YoloDataModule
from lucid_yolo.train.data.coco_yaml import is_coco_yaml, load_coco_yaml
from lucid_yolo.train.data.formats.convert import ultralytics_to_coco


def _coco_yaml(tmp_path: Path, source: Path, **extra: object) -> Path:
    splits = ultralytics_to_coco(source, tmp_path / "coco")
    described: dict[str, object] = {"format": "coco", "path": str(tmp_path / "coco")}
    for split, (json_path, images) in splits.items():
        described[split] = {"json": str(json_path), "images": str(images)}
    described.update(extra)
    path = tmp_path / "coco.yaml"
    path.write_text(yaml.safe_dump(described))
    return path


def test_coco_yaml_feeds_the_data_module(
    tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    source = tiny_dataset("detect")
    path = _coco_yaml(tmp_path, source)
    assert is_coco_yaml(path)
    assert not is_coco_yaml(source)
    data = YoloDataModule(path, task="detect", imgsz=64, batch_size=2, workers=0)
    assert data.num_classes == len(yaml.safe_load(source.read_text())["names"])
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    assert batch["images"].shape == (2, 3, 64, 64)
    assert bool(batch["valid"].any())


def test_coco_yaml_needs_a_val_entry(tiny_dataset: Callable[[str], Path], tmp_path: Path) -> None:
    path = _coco_yaml(tmp_path, tiny_dataset("detect"))
    described = yaml.safe_load(path.read_text())
    del described["val"]
    path.write_text(yaml.safe_dump(described))
    with pytest.raises(DatasetConfigError, match="no `val` entry"):
        load_coco_yaml(path)


def test_coco_yaml_rejects_splits_with_other_categories(
    tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    path = _coco_yaml(tmp_path, tiny_dataset("detect"))
    val_json = Path(yaml.safe_load(path.read_text())["val"]["json"])
    content = json.loads(val_json.read_text())
    content["categories"][0]["name"] = "renamed"
    val_json.write_text(json.dumps(content))
    with pytest.raises(DatasetConfigError, match="use the same category list"):
        load_coco_yaml(path)


def test_coco_yaml_rejects_unknown_crowd_policy(
    tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    path = _coco_yaml(tmp_path, tiny_dataset("detect"), crowd="keep")
    with pytest.raises(DatasetConfigError, match="crowd 'keep'"):
        load_coco_yaml(path)
