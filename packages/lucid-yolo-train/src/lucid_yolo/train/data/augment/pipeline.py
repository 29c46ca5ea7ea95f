"""The per-sample training and validation pipelines, composed from the single augmentations.

Training, for sample ``i`` with its own random stream:

1. geometry: a 4-image mosaic with probability ``mosaic`` (while mosaic is on), else the letterboxed
   image; then copy-paste (segment); then the random affine to ``imgsz x imgsz``;
2. mixup with probability ``mixup``: a second sample built by step 1 from a random index, blended;
3. HSV jitter;
4. horizontal flip with probability ``fliplr`` (keypoints permuted by ``flip_idx``).

With ``defer_pixels`` steps 3 and 4 draw from the stream exactly as without, and the flip moves
the labels, but the image leaves unjittered and unflipped with a
:class:`~lucid_yolo.train.data.augment.sample.DeferredPixels` that the training device applies
(:mod:`.device_pixels`): the same sample, its two cheapest-to-move pixel passes on the device.

Validation and prediction: letterbox only, labels untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from lucid_yolo.train.data.augment.affine import random_affine
from lucid_yolo.train.data.augment.config import AugmentConfig
from lucid_yolo.train.data.augment.flip import flip_lr
from lucid_yolo.train.data.augment.hsv import draw_hsv_gains, hsv_cpu
from lucid_yolo.train.data.augment.letterbox import letterbox
from lucid_yolo.train.data.augment.mix import copy_paste, mixup
from lucid_yolo.train.data.augment.mosaic import mosaic4
from lucid_yolo.train.data.augment.sample import DeferredPixels, Sample


class SampleSource(Protocol):
    """Where the pipeline gets decoded samples (the dataset, or a test fixture)."""

    def __len__(self) -> int: ...

    def load(self, index: int) -> Sample:
        """Sample ``index`` resized to the network size on its long side, labels in pixels."""
        ...


def instance_factors(config: AugmentConfig, *, segment: bool) -> dict[str, int]:
    """By how much each step of :func:`train_sample` that adds instances can multiply a sample's
    count: a mosaic joins four tiles (drawn with replacement, so one image may fill all four),
    copy-paste (segment samples only) at most doubles one, and mixup joins two samples. The
    affine and the flip only drop instances. Steps that are off are left out."""
    factors = {"mosaic": 4 if config.mosaic > 0 else 1}
    factors["copy-paste"] = 2 if segment and config.copy_paste > 0 else 1
    factors["mixup"] = 2 if config.mixup > 0 else 1
    return {step: factor for step, factor in factors.items() if factor > 1}


def train_sample(
    source: SampleSource,
    index: int,
    *,
    imgsz: int,
    config: AugmentConfig,
    use_mosaic: bool,
    flip_idx: Sequence[int] | None,
    rng: np.random.Generator,
    defer_pixels: bool = False,
) -> Sample:
    """One augmented training sample (module docstring for the order).

    Args:
        source: decoded samples.
        index: the sample to build.
        imgsz: network input size (square).
        config: hyper-parameters.
        use_mosaic: False during the close-mosaic epochs.
        flip_idx: keypoint mirror permutation (pose), else ``None``.
        rng: the sample's own random stream (seeded per epoch and index by the dataset).
        defer_pixels: leave HSV and the flip's pixels to the training device (``deferred``).

    Returns:
        An ``imgsz x imgsz`` sample; instances removed on the way are in ``drops``.
    """
    sample = _geometric(source, index, imgsz, config, use_mosaic, rng)
    if rng.random() < config.mixup:
        other = _geometric(source, int(rng.integers(len(source))), imgsz, config, use_mosaic, rng)
        sample = mixup(sample, other, rng)
    gains = draw_hsv_gains(config.hsv_gains, rng)
    flip = rng.random() < config.fliplr
    if defer_pixels:
        sample.deferred = DeferredPixels(hsv_gains=gains, flip=flip)
    elif gains is not None:
        sample.image = hsv_cpu(sample.image, gains)
    if flip:
        sample = flip_lr(sample, flip_idx, pixels=not defer_pixels)
    return sample


def val_sample(source: SampleSource, index: int, *, imgsz: int) -> Sample:
    """One validation/prediction sample: letterboxed to ``imgsz x imgsz``, labels untouched."""
    return letterbox(source.load(index), imgsz)


def _geometric(
    source: SampleSource,
    index: int,
    imgsz: int,
    config: AugmentConfig,
    use_mosaic: bool,
    rng: np.random.Generator,
) -> Sample:
    rule = config.keep_rule
    if use_mosaic and rng.random() < config.mosaic:
        others = rng.integers(0, len(source), 3)
        tiles = [source.load(index), *(source.load(int(i)) for i in others)]
        sample = mosaic4(tiles, imgsz, rule, rng)
    else:
        sample = letterbox(source.load(index), imgsz)
    sample = copy_paste(sample, config.copy_paste, rng)
    return random_affine(
        sample,
        (imgsz, imgsz),
        degrees=config.degrees,
        scale=config.scale,
        shear=config.shear,
        translate=config.translate,
        rule=rule,
        rng=rng,
    )


__all__ = ["SampleSource", "instance_factors", "train_sample", "val_sample"]
