"""The torch Dataset over in-memory labels: decode (or read the cache), augment, pad.

Determinism: the augmentation of image ``i`` in epoch ``e`` draws from
``numpy.random.default_rng((seed, e, i))`` and from nothing else, so a sample is the same whatever
the worker count, worker assignment or prefetch order. The epoch arrives with the index
(``dataset[(epoch, i)]``, see :class:`~lucid_yolo.train.data.sampler.EpochSampler`); a plain
``dataset[i]`` uses :meth:`YoloDataset.set_epoch`'s value.

Nothing is lost silently: instances removed by augmentation and instances beyond
``max_instances`` are counted in :class:`~lucid_yolo.train.data.counters.DataCounters`, and the
first overflow in each process raises one :class:`InstanceOverflowWarning`.

COCO crowds (instances flagged ``ignore`` in a task other than OBB, i.e. ``iscrowd`` regions read
with ``crowd="ignore"``) are left out of *training* samples, as COCO's own training practice
does: a crowd region is a group of objects with one outline, not an instance the network should
learn to predict. Evaluation samples keep them, for the metric to ignore by COCO's crowd rule.
DOTA's difficult instances (OBB) are real objects and are trained on.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from torch.utils.data import Dataset

from lucid_yolo.train.data.augment.config import AugmentConfig
from lucid_yolo.train.data.augment.geometry import box_corners
from lucid_yolo.train.data.augment.pipeline import train_sample, val_sample
from lucid_yolo.train.data.augment.sample import Sample, sample_from_labels
from lucid_yolo.train.data.augment.targets import Targets, source_shapes, to_targets
from lucid_yolo.train.data.cache import ImageCache, load_image
from lucid_yolo.train.data.counters import DataCounters
from lucid_yolo.train.data.dataset_yaml import TASKS, Task
from lucid_yolo.train.data.disk_cache import DiskImageCache
from lucid_yolo.train.data.labels import ImageLabels
from lucid_yolo.train.exceptions import TrainConfigError


class InstanceOverflowWarning(UserWarning):
    """An image had more instances than ``max_instances``; the largest were kept."""


class YoloDataset(Dataset[Targets]):
    """Images and labels of one split, augmented (training) or letterboxed (evaluation).

    Args:
        labels: one entry per image (from a format loader or the synthetic generator).
        task: which label fields the targets carry.
        imgsz: square network input size, pixels.
        augment: training augmentation; ``None`` means evaluation (letterbox only).
        max_instances: fixed number of target rows per image (``N`` of the Batch contract).
        num_keypoints: K for pose (the dataset YAML's ``kpt_shape[0]``).
        flip_idx: pose left/right permutation; required when pose flips (``augment.fliplr > 0``).
        close_mosaic_epoch: first epoch without mosaic (``None``: mosaic in every epoch).
        defer_pixels: training samples leave HSV and the flip's pixels to the training device
            (:mod:`~lucid_yolo.train.data.augment.device_pixels`); the data module sets it from
            ``AugmentConfig.pixels_on_device`` and the trainer's device.
        seed: base of every per-sample random stream.
        cache: decoded-image cache to read from and fill, or ``None``.
        counters: shared counters of produced samples and lost instances, or ``None``.

    Raises:
        TrainConfigError: an unknown task, ``imgsz`` or ``max_instances`` below 1, pose without a
            keypoint count, or pose flips without ``flip_idx``.
    """

    def __init__(
        self,
        labels: Sequence[ImageLabels],
        *,
        task: Task,
        imgsz: int = 640,
        augment: AugmentConfig | None = None,
        max_instances: int = 100,
        num_keypoints: int = 0,
        flip_idx: Sequence[int] | None = None,
        close_mosaic_epoch: int | None = None,
        defer_pixels: bool = False,
        seed: int = 0,
        cache: ImageCache | DiskImageCache | None = None,
        counters: DataCounters | None = None,
    ) -> None:
        if task not in TASKS:
            raise TrainConfigError(f"task {task!r} is unknown; use one of {TASKS!r}")
        if imgsz < 1 or max_instances < 1:
            raise TrainConfigError(
                f"imgsz={imgsz!r} and max_instances={max_instances!r} must both be >= 1"
            )
        if task == "pose" and num_keypoints < 1:
            raise TrainConfigError(
                f"pose needs num_keypoints >= 1, got {num_keypoints!r}; pass kpt_shape[0]"
            )
        if task == "pose" and augment is not None and augment.fliplr > 0 and flip_idx is None:
            raise TrainConfigError(
                f"pose with fliplr={augment.fliplr!r} needs flip_idx to swap left/right "
                "keypoints; add `flip_idx` to the dataset YAML or set fliplr=0"
            )
        self.labels = list(labels)
        self.task: Task = task
        self.imgsz = imgsz
        self.augment = augment
        self.max_instances = max_instances
        self.num_keypoints = num_keypoints
        self.flip_idx = None if flip_idx is None else tuple(flip_idx)
        self.close_mosaic_epoch = close_mosaic_epoch
        self.defer_pixels = defer_pixels
        self.seed = seed
        self.cache = cache
        self.counters = counters
        self.epoch = 0
        self._warned_overflow = False

    def __len__(self) -> int:
        return len(self.labels)

    def set_epoch(self, epoch: int) -> None:
        """Epoch used by plain integer indexing (the sampler path passes it with the index)."""
        self.epoch = epoch

    def mosaic_enabled(self, epoch: int) -> bool:
        """Whether mosaic may run in ``epoch`` (off from ``close_mosaic_epoch`` on)."""
        return self.close_mosaic_epoch is None or epoch < self.close_mosaic_epoch

    def load(self, index: int) -> Sample:
        """Image ``index`` resized to ``imgsz`` on its long side, labels in its pixels.

        Training samples (``augment`` set) leave COCO crowds out (module docstring).
        """
        cached = None if self.cache is None else self.cache.get(index)
        if cached is None:
            image, orig_size = load_image(self.labels[index].image_path, self.imgsz)
            if self.cache is not None:
                self.cache.put(index, image, orig_size)
        else:
            image, orig_size = cached
        sample = sample_from_labels(image, self.labels[index], index, orig_size)
        if self.augment is not None and self.task != "obb" and sample.ignore is not None:
            sample = sample.select(~sample.ignore)  # COCO crowds are not training targets
        return self._with_task_fields(sample)

    def __getitem__(self, item: int | tuple[int, int]) -> Targets:
        epoch, index = item if isinstance(item, tuple) else (self.epoch, item)
        if self.augment is None:
            sample = val_sample(self, index, imgsz=self.imgsz)
        else:
            sample = train_sample(
                self,
                index,
                imgsz=self.imgsz,
                config=self.augment,
                use_mosaic=self.mosaic_enabled(epoch),
                flip_idx=self.flip_idx,
                rng=np.random.default_rng((self.seed, epoch, index)),
                defer_pixels=self.defer_pixels,
            )
        targets = to_targets(sample, self.task, self.max_instances, self.num_keypoints)
        if self.augment is None and self.task == "segment":
            targets.source_shapes = source_shapes(self.labels[index], targets.orig_size)
        if targets.overflow and not self._warned_overflow:
            self._warned_overflow = True
            warnings.warn(
                f"the sample of image {self.labels[index].image_path} (with its mosaic/mixup "
                f"partners) has {targets.overflow} instance(s) more than "
                f"max_instances={self.max_instances}; the largest were kept and the rest are "
                "counted under 'overflow' (raise max_instances to keep them all)",
                InstanceOverflowWarning,
                stacklevel=2,
            )
        if self.counters is not None:
            self.counters.record(targets.drops, targets.overflow)
        return targets

    def _with_task_fields(self, sample: Sample) -> Sample:
        """Keep only the task's geometry, present with n rows even for background images.

        Boxes stand in for a missing polygon (segment) or missing corners (OBB), so every sample
        of a dataset carries the same fields and mosaic/mixup can always combine them.
        """
        n = len(sample)
        polygons = keypoints = corners = None
        if self.task == "segment":
            polygons = sample.polygons or list(box_corners(sample.boxes))
        elif self.task == "pose":
            keypoints = sample.keypoints
            if keypoints is None:
                keypoints = np.zeros((n, self.num_keypoints, 3), dtype=np.float32)
        elif self.task == "obb":
            corners = box_corners(sample.boxes) if sample.corners is None else sample.corners
        return replace(sample, polygons=polygons, keypoints=keypoints, corners=corners)


__all__ = ["InstanceOverflowWarning", "YoloDataset"]
