"""PreparedDataset: in-memory labels with their metadata."""

from __future__ import annotations

import pytest

from lucid_yolo.train.data.errors import DatasetConfigError
from lucid_yolo.train.data.prepared import PreparedDataset


def test_prepared_dataset_needs_train_and_val() -> None:
    with pytest.raises(DatasetConfigError, match=r"no 'val' split among \['train'\]"):
        PreparedDataset({"train": []}, names=("a",), task="detect")


def test_prepared_dataset_pose_needs_kpt_shape() -> None:
    with pytest.raises(DatasetConfigError, match="needs kpt_shape"):
        PreparedDataset({"train": [], "val": []}, names=("a",), task="pose")


def test_prepared_dataset_num_classes() -> None:
    assert PreparedDataset({"train": [], "val": []}, names=("a", "b"), task="obb").num_classes == 2
