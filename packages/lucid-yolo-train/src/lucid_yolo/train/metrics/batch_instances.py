"""What the metrics read for a whole batch at once: every image's rows padded to one size.

A validation batch on the GPU comes out of the network padded already (each image's ``max_det``
top-k rows, each image's target rows up to the batch's largest), so the accumulator can work on
the batch as one tensor per field instead of once per image: one kernel launch per operation
for the whole batch, where a loop over images costs one per image (issue 11, session 6: the
per-image loop was most of a validation pass's host time). The fields are those of
:mod:`~lucid_yolo.train.metrics.image_instances` with a leading batch dimension ``B``; padding
rows are flagged in ``valid``.

Masks are the exception: an image's masks are at its own source size, and a batch of them at
once would hold ``B × max_det`` full-size masks. They are given as a function of the image index
that builds that image's masks when the accumulator asks, so that one image's masks are alive at
a time, together with the rows they belong to: a producer may leave out rows that cannot pair
with any target (a prediction of a class no target of the image has), whose masks would never be
read (issue 11: most of a segment validation's work is building masks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import torch
from torch import Tensor

from lucid_yolo.train.metrics.image_instances import (
    ImagePredictions,
    ImageTargets,
    MetricsInputError,
)

ImageMasks = Callable[[int], tuple[Tensor, Tensor]]
"""``masks(i)``: image ``i``'s masks (r, H_i, W_i) bool and the rows (r,) int64 they belong to.

Rows left out must be unable to pair with any target (padding, or another class than every
target of the image); their overlaps are never computed.
"""


@dataclass(frozen=True)
class BatchPredictions:
    """Decoded predictions of B images, D rows each, in source-image pixels.

    Attributes:
        scores: (B, D) float.
        classes: (B, D) int.
        valid: (B, D) bool, rows that are predictions (the rest is padding).
        boxes: (B, D, 4) ``xyxy``, or ``None``.
        keypoints: (B, D, K, 3), or ``None``.
        rboxes: (B, D, 5) ``xywhr``, or ``None``.
        masks: per image, its masks and their rows (:data:`ImageMasks`), or ``None``.
    """

    scores: Tensor
    classes: Tensor
    valid: Tensor
    boxes: Tensor | None = None
    keypoints: Tensor | None = None
    rboxes: Tensor | None = None
    masks: ImageMasks | None = None

    @classmethod
    def from_images(cls, images: Sequence[ImagePredictions]) -> BatchPredictions:
        """The images' records padded to the longest (at least one image).

        Raises:
            MetricsInputError: a field given for some images and not for others.
        """
        return cls(
            scores=_pad([image.scores for image in images]),
            classes=_pad([image.classes for image in images]),
            valid=_pad([image.valid_flags() for image in images]),
            boxes=_pad_optional("boxes", [image.boxes for image in images]),
            keypoints=_pad_optional("keypoints", [image.keypoints for image in images]),
            rboxes=_pad_optional("rboxes", [image.rboxes for image in images]),
            masks=_image_masks("masks", [image.masks for image in images]),
        )


@dataclass(frozen=True)
class BatchTargets:
    """Ground truth of B images, G rows each, in source-image pixels.

    Attributes:
        classes: (B, G) int.
        valid: (B, G) bool, rows that are instances (the rest is padding).
        boxes: (B, G, 4) ``xyxy``, or ``None``.
        keypoints: (B, G, K, 3), or ``None``.
        rboxes: (B, G, 5) ``xywhr``, or ``None``.
        iscrowd: (B, G) bool COCO crowds, or ``None`` (none).
        difficult: (B, G) bool DOTA difficult instances, or ``None`` (none).
        areas: (B, G) the areas that scale OKS, or ``None`` (the box areas).
        masks: per image, its masks and their rows (:data:`ImageMasks`), or ``None``.
    """

    classes: Tensor
    valid: Tensor
    boxes: Tensor | None = None
    keypoints: Tensor | None = None
    rboxes: Tensor | None = None
    iscrowd: Tensor | None = None
    difficult: Tensor | None = None
    areas: Tensor | None = None
    masks: ImageMasks | None = None

    def crowd_flags(self) -> Tensor:
        """(B, G) bool: COCO crowd regions."""
        return _flags(self.iscrowd, self.classes)

    def ignore_flags(self) -> Tensor:
        """(B, G) bool: instances that are ignored, crowd or difficult."""
        return self.crowd_flags() | _flags(self.difficult, self.classes)

    @classmethod
    def from_images(cls, images: Sequence[ImageTargets]) -> BatchTargets:
        """The images' records padded to the longest (at least one image).

        Raises:
            MetricsInputError: a field given for some images and not for others.
        """
        return cls(
            classes=_pad([image.classes for image in images]),
            valid=_pad([image.valid_flags() for image in images]),
            boxes=_pad_optional("boxes", [image.boxes for image in images]),
            keypoints=_pad_optional("keypoints", [image.keypoints for image in images]),
            rboxes=_pad_optional("rboxes", [image.rboxes for image in images]),
            iscrowd=_pad_optional("iscrowd", [image.iscrowd for image in images]),
            difficult=_pad_optional("difficult", [image.difficult for image in images]),
            areas=_pad_optional("areas", [image.areas for image in images]),
            masks=_image_masks("masks", [image.masks for image in images]),
        )

    def image(self, i: int) -> ImageTargets:
        """Image ``i``'s rows, padding included (flagged in ``valid``), masks left out."""
        return ImageTargets(
            classes=self.classes[i],
            boxes=_row(self.boxes, i),
            keypoints=_row(self.keypoints, i),
            rboxes=_row(self.rboxes, i),
            iscrowd=_row(self.iscrowd, i),
            difficult=_row(self.difficult, i),
            areas=_row(self.areas, i),
            valid=self.valid[i],
        )


BatchRecord = TypeVar("BatchRecord", BatchPredictions, BatchTargets)


def flat_tensors(record: BatchPredictions | BatchTargets, prefix: str) -> dict[str, Tensor]:
    """The record's tensors under ``<prefix><field>``, the fields left ``None`` and the masks (a
    function) left out: a record as a CUDA graph's region returns it."""
    values = ((f.name, getattr(record, f.name)) for f in fields(record))
    return {prefix + name: value for name, value in values if isinstance(value, Tensor)}


def from_flat_tensors(
    kind: type[BatchRecord], flat: Mapping[str, Tensor], prefix: str
) -> BatchRecord:
    """The record of ``kind`` that :func:`flat_tensors` flattened under ``prefix`` (masks
    ``None``); the names without the prefix are someone else's."""
    values: dict[str, Any] = {
        k.removeprefix(prefix): v for k, v in flat.items() if k.startswith(prefix)
    }
    return kind(**values)


def _pad(parts: Sequence[Tensor]) -> Tensor:
    """(len(parts), longest, *rest) on the first part's device: each part's rows, then zeros.

    Zero padding is ``False`` for flags; every padding row is flagged in ``valid``.
    """
    first = parts[0]
    longest = max(part.shape[0] for part in parts)
    out = first.new_zeros((len(parts), longest, *first.shape[1:]))
    for i, part in enumerate(parts):
        out[i, : part.shape[0]] = part.to(out.device)
    return out


def _present(name: str, parts: Sequence[Tensor | None]) -> list[Tensor] | None:
    """``parts`` when every image gives the field, ``None`` when none does.

    Raises:
        MetricsInputError: some images give it and others not.
    """
    given = [part for part in parts if part is not None]
    if given and len(given) != len(parts):
        raise MetricsInputError(
            f"{name} is given for {len(given)!r} of {len(parts)!r} images of the batch: "
            "give it for every image or for none"
        )
    return given or None


def _pad_optional(name: str, parts: Sequence[Tensor | None]) -> Tensor | None:
    present = _present(name, parts)
    return None if present is None else _pad(present)


def _image_masks(name: str, parts: Sequence[Tensor | None]) -> ImageMasks | None:
    """Every row's masks of each image, as :data:`ImageMasks`."""
    present = _present(name, parts)
    if present is None:
        return None
    return lambda i: (present[i], torch.arange(present[i].shape[0], device=present[i].device))


def _row(value: Tensor | None, i: int) -> Tensor | None:
    return None if value is None else value[i]


def _flags(value: Tensor | None, like: Tensor) -> Tensor:
    if value is None:
        return torch.zeros(like.shape, dtype=torch.bool, device=like.device)
    return value.to(device=like.device, dtype=torch.bool)


__all__ = [
    "BatchPredictions",
    "BatchRecord",
    "BatchTargets",
    "ImageMasks",
    "flat_tensors",
    "from_flat_tensors",
]
