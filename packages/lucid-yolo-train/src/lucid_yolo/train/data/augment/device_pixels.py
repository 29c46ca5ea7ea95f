"""Finish on the training device the pixel augmentations the workers drew but left undone.

Why (issue 11, data wait): HSV jitter and the flip's mirror copy are about a third of a cached
detect sample's worker CPU time at 640 px (``tools/profile_augment.py``:
docs/engineering/whole-fit-speed.md), and on a GPU they cost a few table lookups per pixel. With
``AugmentConfig.pixels_on_device`` the worker draws both from the sample's own stream where the
CPU path draws them and moves the labels; the batch brings the draws (``deferred_hsv``,
``deferred_flip``) and :class:`DevicePixels` applies them right after the batch reaches the device,
before Lightning hands it to the training step. The result is the batch the CPU path makes, bit for
bit (:mod:`.hsv` says where and why), so native and replayed steps, resumes and the verifier see
the same bytes either way.

HSV maps each pixel by its own value and the flip only moves pixels, so the device may apply them
in the CPU path's order (jitter, then mirror) without a difference.
"""

from __future__ import annotations

import torch

from lucid_yolo.train.data.augment.hsv import HsvTables, hsv_on_device
from lucid_yolo.train.data.batch import Batch


class DevicePixels:
    """Applies a batch's deferred HSV gains and flips to its images, on the images' device.

    The conversion tables (:class:`~lucid_yolo.train.data.augment.hsv.HsvTables`, 83 MB) are
    built at the first batch that needs them and kept for the device.

    Example:
        ``batch = DevicePixels()(batch)`` after the batch was moved to the device.
    """

    def __init__(self) -> None:
        self._tables: HsvTables | None = None

    def __call__(self, batch: Batch) -> Batch:
        """``batch`` with its images finished and the ``deferred_*`` keys removed.

        A batch without deferred work (evaluation, or pixels finished in the workers) is
        returned untouched.
        """
        if "deferred_flip" not in batch:
            return batch
        images = batch["images"]
        gains = batch.pop("deferred_hsv", None)
        if gains is not None:
            images = hsv_on_device(images, gains, self._tables_on(images.device))
        flip = batch.pop("deferred_flip")
        batch["images"] = torch.where(flip[:, None, None, None], images.flip(-1), images)
        return batch

    def _tables_on(self, device: torch.device) -> HsvTables:
        if self._tables is None or self._tables.to_hsv.device != device:
            self._tables = HsvTables.on(device)
        return self._tables


__all__ = ["DevicePixels"]
