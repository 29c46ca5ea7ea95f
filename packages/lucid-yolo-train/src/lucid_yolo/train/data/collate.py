"""Stack per-image :class:`~lucid_yolo.train.data.augment.targets.Targets` into a :class:`Batch`.

Every image already has exactly ``max_instances`` target rows, so collation is a plain stack:
no per-batch padding, and every batch of a run has the same shapes (the premise of replaying the
loss inside a CUDA graph). Task fields are included when the images carry them.
:func:`collate_packed` stacks the same fields into one buffer (:mod:`.packed_batch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar, cast

import numpy as np
import torch

from lucid_yolo.train.data.augment.targets import Targets
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.data.packed_batch import PackedBatch

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
    batch = {
        key: torch.from_numpy(np.stack(column)) if _is_arrays(column) else column
        for key, column in columns(items).items()
    }
    return cast(Batch, batch)


def collate_packed(items: Sequence[Targets]) -> PackedBatch:
    """Collate one batch into one buffer (:mod:`.packed_batch`); ``unpack()`` gives the Batch
    :func:`collate` gives, bit for bit.

    Raises:
        ValueError: an empty batch.
    """
    return PackedBatch.stack(columns(items))


def columns(items: Sequence[Targets]) -> dict[str, Any]:
    """Per Batch key in the Batch's order, one numpy array per image (the fields a batch stacks)
    or, for ``source_shapes``, the per-image lists.

    Raises:
        ValueError: an empty batch, or images of different tasks.
    """
    if not items:
        raise ValueError("collate got an empty batch; check the sampler and batch_size >= 1")
    fields: dict[str, Any] = {
        "images": [t.image for t in items],
        "classes": [t.classes for t in items],
        "valid": [t.valid for t in items],
        "boxes": [t.boxes for t in items],
        "image_ids": [np.asarray(t.image_id, dtype=np.int64) for t in items],
        "orig_sizes": [np.asarray(t.orig_size, dtype=np.int64) for t in items],
        "scale_pad": [np.asarray(t.scale_pad, dtype=np.float32) for t in items],
        "ignore": [t.ignore for t in items],
    }
    first = items[0]
    if first.masks is not None:
        fields["masks"] = [_field(t.masks) for t in items]
    if first.keypoints is not None:
        fields["keypoints"] = [_field(t.keypoints) for t in items]
    if first.rboxes is not None:
        fields["rboxes"] = [_field(t.rboxes) for t in items]
    if first.source_shapes is not None:
        fields["source_shapes"] = [list(_field(t.source_shapes)) for t in items]
    if first.deferred_hsv is not None:
        fields["deferred_hsv"] = [_field(t.deferred_hsv) for t in items]
    if first.deferred_flip is not None:
        fields["deferred_flip"] = [np.asarray(_field(t.deferred_flip), np.bool_) for t in items]
    if first.deferred_masks is not None:
        fields["deferred_masks"] = [_field(t.deferred_masks) for t in items]
    return fields


def _is_arrays(column: Any) -> bool:
    """Whether a column holds one array per image (stacked), not a per-image list."""
    return isinstance(column[0], np.ndarray)


def _field(value: _T | None) -> _T:
    if value is None:
        raise ValueError("collate got images of different tasks in one batch")
    return value


__all__ = ["collate", "collate_packed", "columns"]
