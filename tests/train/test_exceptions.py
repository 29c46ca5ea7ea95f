"""User-facing checks of the training package raise its typed errors, never a bare ValueError."""

from __future__ import annotations

from pathlib import Path

import pytest

from lucid_yolo.train.data.synthetic import generate_synthetic
from lucid_yolo.train.exceptions import TrainConfigError, TrainError
from lucid_yolo.train.losses import build_loss
from lucid_yolo.train.module import YoloModule


def test_train_config_error_is_a_train_error_and_a_value_error() -> None:
    assert issubclass(TrainConfigError, TrainError)
    assert issubclass(TrainConfigError, ValueError)


def test_module_out_of_range_option_is_train_config_error() -> None:
    with pytest.raises(TrainConfigError, match=r"lr0 must be > 0, got -1\.0"):
        YoloModule(lr0=-1.0)


def test_unknown_loss_task_is_train_config_error() -> None:
    with pytest.raises(TrainConfigError, match="unknown task 'detcet'"):
        build_loss("detcet", num_classes=1)


def test_synthetic_bad_image_size_is_train_config_error(tmp_path: Path) -> None:
    with pytest.raises(TrainConfigError, match="need imgsz >= 64"):
        generate_synthetic(str(tmp_path), imgsz=32)
