"""A checkpoint's data module metadata read back as a dataset description."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lucid_yolo.train.data.checkpoint_spec import is_checkpoint, load_checkpoint_data
from lucid_yolo.train.data.errors import DatasetConfigError

KEY = "YoloDataModule"


def _save(path: Path, state: object) -> Path:
    torch.save({"state_dict": {"w": torch.zeros(2)}, KEY: state}, path)
    return path


def test_load_checkpoint_data_reads_pose_metadata(tmp_path: Path) -> None:
    state = {
        "names": ["person"],
        "task": "pose",
        "imgsz": 320,
        "kpt_shape": [4, 3],
        "flip_idx": [1, 0, 3, 2],
    }
    saved = load_checkpoint_data(_save(tmp_path / "m.ckpt", state), KEY)
    assert saved.imgsz == 320
    assert saved.spec.names == ("person",)
    assert saved.spec.task == "pose"
    assert saved.spec.kpt_shape == (4, 3)
    assert saved.spec.flip_idx == (1, 0, 3, 2)
    assert dict(saved.spec.splits) == {}


def test_load_checkpoint_data_reads_the_dataset_file(tmp_path: Path) -> None:
    state = {"names": ["a"], "task": "detect", "imgsz": 64, "dataset_file": "/data/own/data.yaml"}
    saved = load_checkpoint_data(_save(tmp_path / "m.ckpt", state), KEY)
    assert saved.dataset_file == Path("/data/own/data.yaml")


def test_load_checkpoint_data_older_checkpoint_has_no_dataset_file(tmp_path: Path) -> None:
    state = {"names": ["a"], "task": "detect", "imgsz": 64}
    assert load_checkpoint_data(_save(tmp_path / "m.ckpt", state), KEY).dataset_file is None


def test_load_checkpoint_data_without_metadata(tmp_path: Path) -> None:
    path = tmp_path / "other.ckpt"
    torch.save({"weights": torch.zeros(1)}, path)
    with pytest.raises(DatasetConfigError, match="not a lucid-yolo checkpoint"):
        load_checkpoint_data(path, KEY)


def test_load_checkpoint_data_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "text.ckpt"
    path.write_text("hello\n")
    with pytest.raises(DatasetConfigError, match="cannot be read as a checkpoint"):
        load_checkpoint_data(path, KEY)


def test_load_checkpoint_data_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetConfigError, match="no such checkpoint file"):
        load_checkpoint_data(tmp_path / "none.ckpt", KEY)


def test_is_checkpoint_by_suffix() -> None:
    assert is_checkpoint("runs/best.CKPT")
    assert not is_checkpoint("data.yaml")
