"""Datasets, augmentation and the padded dense batch contract."""

from lucid_yolo.train.data.batch import Batch

__all__ = ["Batch"]
