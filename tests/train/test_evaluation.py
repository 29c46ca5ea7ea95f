"""Evaluator: the ground truth it scores comes from the batch, ignore flags included."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import torch

from lucid_yolo.train import Evaluator
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.data.collate import collate
from lucid_yolo.train.data.dataset import YoloDataset
from lucid_yolo.train.data.formats import read_dota


def _dota_batch(tmp_path: Path) -> Batch:
    images, label_dir = tmp_path / "images", tmp_path / "labelTxt"
    images.mkdir()
    label_dir.mkdir()
    cv2.imwrite(str(images / "P1.png"), np.zeros((64, 128, 3), np.uint8))
    rows = "10 5 60 5 60 45 10 45 plane 0\n70 10 90 10 90 30 70 30 ship 1\n"
    (label_dir / "P1.txt").write_text(rows)
    dataset = YoloDataset(read_dota(images, label_dir).labels, task="obb", imgsz=128)
    return collate([dataset[0]])


def test_evaluator_targets_mark_dota_difficult_as_ignored(tmp_path: Path) -> None:
    batch = _dota_batch(tmp_path)
    assert batch["ignore"][0, :3].tolist() == [False, True, False]
    evaluator = Evaluator("obb", strides=(8, 16, 32), conf=0.001, max_det=10)
    targets = evaluator.targets(batch, 0)
    assert targets.difficult is not None
    assert targets.difficult.tolist() == [False, True]
    assert targets.ignore_flags().tolist() == [False, True]
    assert targets.rboxes is not None
    torch.testing.assert_close(targets.rboxes[1, :4], torch.tensor([80.0, 20.0, 20.0, 20.0]))
