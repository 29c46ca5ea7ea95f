"""Stack per-image :class:`~lucid_yolo.train.data.augment.targets.Targets` into a :class:`Batch`.

Every image already has exactly ``max_instances`` target rows, so collation is a plain stack:
no per-batch padding, and every batch of a run has the same shapes (the premise of replaying the
loss inside a CUDA graph). Task fields are included when the images carry them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import torch

from lucid_yolo.train.data.augment.targets import Targets
from lucid_yolo.train.data.batch import Batch

_T = TypeVar("_T")


def collate(items: Sequence[Targets]) -> Batch:
    """Collate one batch.

    Args:
        items: B targets of the same task, image size and ``max_instances``.

    Returns:
        The Batch (shapes and dtypes in :mod:`lucid_yolo.train.data.batch`).

    Raises:
        ValueError: an empty batch.
    """
    if not items:
        raise ValueError("collate got an empty batch; check the sampler and batch_size >= 1")
    batch = Batch(
        images=torch.from_numpy(np.stack([t.image for t in items])),
        classes=torch.from_numpy(np.stack([t.classes for t in items])),
        valid=torch.from_numpy(np.stack([t.valid for t in items])),
        boxes=torch.from_numpy(np.stack([t.boxes for t in items])),
        image_ids=torch.tensor([t.image_id for t in items], dtype=torch.int64),
        orig_sizes=torch.tensor([t.orig_size for t in items], dtype=torch.int64),
        scale_pad=torch.tensor([t.scale_pad for t in items], dtype=torch.float32),
        ignore=torch.from_numpy(np.stack([t.ignore for t in items])),
    )
    first = items[0]
    if first.masks is not None:
        batch["masks"] = torch.from_numpy(np.stack([_field(t.masks) for t in items]))
    if first.keypoints is not None:
        batch["keypoints"] = torch.from_numpy(np.stack([_field(t.keypoints) for t in items]))
    if first.rboxes is not None:
        batch["rboxes"] = torch.from_numpy(np.stack([_field(t.rboxes) for t in items]))
    if first.source_shapes is not None:
        batch["source_shapes"] = [list(_field(t.source_shapes)) for t in items]
    if first.deferred_hsv is not None:
        batch["deferred_hsv"] = torch.from_numpy(np.stack([_field(t.deferred_hsv) for t in items]))
    if first.deferred_flip is not None:
        batch["deferred_flip"] = torch.tensor([_field(t.deferred_flip) for t in items])
    if first.deferred_masks is not None:
        batch["deferred_masks"] = torch.from_numpy(
            np.stack([_field(t.deferred_masks) for t in items])
        )
    return batch


def _field(value: _T | None) -> _T:
    if value is None:
        raise ValueError("collate got images of different tasks in one batch")
    return value


__all__ = ["collate"]
