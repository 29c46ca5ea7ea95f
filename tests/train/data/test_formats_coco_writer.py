"""COCO json writing: instances read from an RLE go back as that RLE."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from lucid_yolo.train.data.formats import read_coco, write_coco
from lucid_yolo.train.data.labels import ImageLabels
from lucid_yolo.train.geometry import RunLengthMask, rle_encode


def test_write_coco_writes_an_rle_instance_as_its_rle_and_a_polygon_as_polygon(
    tmp_path: Path,
) -> None:
    cv2.imwrite(str(tmp_path / "a.png"), np.zeros((20, 30, 3), np.uint8))
    ring = np.zeros((20, 30), np.uint8)
    ring[2:18, 4:24] = 1
    ring[6:14, 8:20] = 0
    written = rle_encode(ring)
    rle = RunLengthMask.from_counts(str(written["counts"]), 20, 30)
    square = np.array([[0.0, 0.0], [0.2, 0.0], [0.2, 0.5], [0.0, 0.5]], dtype=np.float32)
    labels = ImageLabels(
        image_path=tmp_path / "a.png",
        classes=np.array([0, 0], dtype=np.int64),
        boxes=np.array([[4 / 30, 0.1, 0.8, 0.9], [0.0, 0.0, 0.2, 0.5]], dtype=np.float32),
        polygons=[square, square],
        rle_masks=[rle, None],
    )
    path = write_coco(
        [labels], tmp_path / "a.json", names=("x",), task="segment", images_root=tmp_path
    )
    ring_ann, polygon_ann = json.loads(path.read_text())["annotations"]
    assert ring_ann["segmentation"] == written
    assert ring_ann["area"] == 16 * 20 - 8 * 12
    assert isinstance(polygon_ann["segmentation"], list)
    read = read_coco(path, tmp_path, task="segment").labels[0]
    assert read.rle_masks is not None
    ring_read = read.rle_masks[0]
    assert ring_read is not None
    np.testing.assert_array_equal(ring_read.decode(), ring)
    assert read.rle_masks[1] is None
