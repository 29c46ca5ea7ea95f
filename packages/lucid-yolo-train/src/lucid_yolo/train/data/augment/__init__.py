"""Training augmentation on CPU (numpy/OpenCV), its pixel passes optionally on the device.

Every augmentation acts on a :class:`Sample` (image + all task geometries in pixels), so boxes,
polygons, keypoints and rotated-box corners always move together; :func:`to_targets` turns the
result into one image's slice of the padded dense batch.
"""

from lucid_yolo.train.data.augment.affine import affine_matrix, random_affine
from lucid_yolo.train.data.augment.config import AugmentConfig
from lucid_yolo.train.data.augment.device_pixels import DevicePixels
from lucid_yolo.train.data.augment.flip import flip_lr
from lucid_yolo.train.data.augment.geometry import KeepRule, clip_polygon
from lucid_yolo.train.data.augment.hsv import (
    MAX_LOOKUP_IMAGES,
    HsvTables,
    JitterTables,
    draw_hsv_gains,
    hsv_cpu,
    hsv_lookup,
    hsv_luts,
    hsv_on_device,
    jitter_tables,
)
from lucid_yolo.train.data.augment.letterbox import (
    fit_size,
    letterbox,
    resize_long_side,
    unletterbox_boxes,
    unletterbox_points,
    unletterbox_rboxes,
)
from lucid_yolo.train.data.augment.mix import copy_paste, mixup
from lucid_yolo.train.data.augment.mosaic import mosaic4
from lucid_yolo.train.data.augment.pipeline import SampleSource, train_sample, val_sample
from lucid_yolo.train.data.augment.rbox import canonical_xywhr, corners_to_xywhr
from lucid_yolo.train.data.augment.sample import (
    DeferredPixels,
    DropCounts,
    Sample,
    sample_from_labels,
)
from lucid_yolo.train.data.augment.targets import (
    MASK_STRIDE,
    Targets,
    largest_first,
    to_targets,
)
from lucid_yolo.train.data.augment.warp import PAD_VALUE, clip_sample, warp_sample

__all__ = [
    # configuration
    "AugmentConfig",
    "KeepRule",
    # the unit every augmentation transforms
    "DeferredPixels",
    "DropCounts",
    "Sample",
    "sample_from_labels",
    # pipelines
    "SampleSource",
    "train_sample",
    "val_sample",
    # geometric augmentations
    "PAD_VALUE",
    "affine_matrix",
    "clip_polygon",
    "clip_sample",
    "fit_size",
    "flip_lr",
    "letterbox",
    "random_affine",
    "resize_long_side",
    "warp_sample",
    # inverse letterbox (metrics, prediction)
    "unletterbox_boxes",
    "unletterbox_points",
    "unletterbox_rboxes",
    # multi-image augmentations
    "copy_paste",
    "mixup",
    "mosaic4",
    # colour
    "MAX_LOOKUP_IMAGES",
    "HsvTables",
    "JitterTables",
    "draw_hsv_gains",
    "hsv_cpu",
    "hsv_lookup",
    "hsv_luts",
    "hsv_on_device",
    "jitter_tables",
    # pixel passes finished on the training device
    "DevicePixels",
    # rotated boxes
    "canonical_xywhr",
    "corners_to_xywhr",
    # batch conversion
    "MASK_STRIDE",
    "Targets",
    "largest_first",
    "to_targets",
]
