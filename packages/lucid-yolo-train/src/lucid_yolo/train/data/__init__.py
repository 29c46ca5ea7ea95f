"""Datasets, augmentation and the padded dense batch contract.

Formats (Ultralytics, COCO, DOTA) produce :class:`ImageLabels`; :class:`YoloDataset` augments
them in pixel space; :func:`collate` pads them into a :class:`Batch`; :class:`YoloDataModule`
wires it all into Lightning.
"""

from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.data.cache import ImageCache
from lucid_yolo.train.data.check import DatasetReport, check_dataset
from lucid_yolo.train.data.checkpoint_spec import CheckpointData, load_checkpoint_data
from lucid_yolo.train.data.collate import collate
from lucid_yolo.train.data.counters import DataCounters
from lucid_yolo.train.data.datamodule import YoloDataModule
from lucid_yolo.train.data.dataset import InstanceOverflowWarning, YoloDataset
from lucid_yolo.train.data.dataset_yaml import DatasetSpec, load_dataset_yaml
from lucid_yolo.train.data.errors import (
    DataError,
    DatasetConfigError,
    DataWarning,
    ImageReadError,
    LabelFormatError,
)
from lucid_yolo.train.data.image_source import list_images
from lucid_yolo.train.data.labels import ImageLabels
from lucid_yolo.train.data.prepared import PreparedDataset
from lucid_yolo.train.data.sampler import EpochSampler
from lucid_yolo.train.data.synthetic import generate_synthetic

__all__ = [
    # contracts
    "Batch",
    "ImageLabels",
    # dataset description and checking
    "DatasetSpec",
    "load_dataset_yaml",
    "DatasetReport",
    "check_dataset",
    "PreparedDataset",
    "CheckpointData",
    "load_checkpoint_data",
    "generate_synthetic",
    # images to predict
    "list_images",
    # loading
    "YoloDataModule",
    "YoloDataset",
    "EpochSampler",
    "ImageCache",
    "DataCounters",
    "collate",
    # errors and warnings
    "DataError",
    "DatasetConfigError",
    "ImageReadError",
    "LabelFormatError",
    "DataWarning",
    "InstanceOverflowWarning",
]
