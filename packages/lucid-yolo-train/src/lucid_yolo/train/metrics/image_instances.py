"""What the metrics read: the predictions and the ground truth of one image.

Both records hold tensors in the pixel coordinates of the *source* image (the validation loop
undoes the letterbox first), because COCO-style AP is defined on the original annotation geometry.
Geometry fields are optional; each metric kind checks for the fields it reads
(:func:`require_fields`) and says which one is missing, so a detector does not have to invent masks
and an OBB head does not have to invent axis-aligned boxes.

================  ==============  ==========  =================================================
field             shape           dtype       meaning
================  ==============  ==========  =================================================
``scores``        (n,)            float       predictions only: confidence, higher is better
``classes``       (n,)            int         class id
``boxes``         (n, 4)          float       ``xyxy`` pixels
``masks``         (n, H, W)       bool        instance masks at source resolution (H, W)
``keypoints``     (n, K, 3)       float       pixels ``x, y`` and a third column: prediction
                                              confidence (unused) or target visibility 0/1/2
``rboxes``        (n, 5)          float       ``xywhr`` pixels and radians (centre, size, angle)
``iscrowd``       (n,)            bool        targets only: COCO crowd region
``difficult``     (n,)            bool        targets only: DOTA/VOC difficult instance
``areas``         (n,)            float       targets only: the area that scales OKS (COCO's
                                              ``area`` field); default: the box area ``w * h``
``valid``         (n,)            bool        rows that are real; default: all. Static-shape
                                              producers keep padding instead of indexing it
                                              away (a boolean index waits for the device):
                                              predictions below the confidence cut, target
                                              rows beyond an image's instances
================  ==============  ==========  =================================================
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lucid_yolo.train.exceptions import TrainError


class MetricsInputError(TrainError, ValueError):
    """A prediction or target record does not fit the metric it was given to."""


@dataclass(frozen=True)
class ImagePredictions:
    """Decoded predictions of one image, in source-image pixels (see the module table)."""

    scores: Tensor
    classes: Tensor
    boxes: Tensor | None = None
    masks: Tensor | None = None
    keypoints: Tensor | None = None
    rboxes: Tensor | None = None
    valid: Tensor | None = None

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def valid_flags(self) -> Tensor:
        """(n,) bool: rows that are predictions (all ``True`` when ``valid`` is not given)."""
        return _flags(self.valid, len(self), self.scores.device, default=True)


@dataclass(frozen=True)
class ImageTargets:
    """Ground truth of one image, in source-image pixels (see the module table).

    ``iscrowd`` and ``difficult`` both mark instances that are *ignored*: a prediction matched to
    one counts as neither a true nor a false positive, and it does not enter the recall
    denominator. They differ in overlap: a crowd region is scored by intersection over the
    prediction's area (COCO), a difficult instance by plain IoU (DOTA). Both may absorb any number
    of predictions.
    """

    classes: Tensor
    boxes: Tensor | None = None
    masks: Tensor | None = None
    keypoints: Tensor | None = None
    rboxes: Tensor | None = None
    iscrowd: Tensor | None = None
    difficult: Tensor | None = None
    areas: Tensor | None = None
    valid: Tensor | None = None

    def __len__(self) -> int:
        return int(self.classes.shape[0])

    def valid_flags(self) -> Tensor:
        """(m,) bool: rows that are instances (all ``True`` when ``valid`` is not given)."""
        return _flags(self.valid, len(self), self.classes.device, default=True)

    def crowd_flags(self) -> Tensor:
        """(m,) bool: COCO crowd regions (all ``False`` when ``iscrowd`` is not given)."""
        return _flags(self.iscrowd, len(self), self.classes.device)

    def ignore_flags(self) -> Tensor:
        """(m,) bool: instances that are ignored, crowd or difficult."""
        return self.crowd_flags() | _flags(self.difficult, len(self), self.classes.device)


_TRAILING_SHAPES: dict[str, tuple[int, ...]] = {
    "boxes": (4,),
    "rboxes": (5,),
    "scores": (),
    "classes": (),
    "iscrowd": (),
    "difficult": (),
    "areas": (),
    "valid": (),
}


def require_fields(
    record: ImagePredictions | ImageTargets, names: tuple[str, ...], kind: str
) -> list[Tensor]:
    """Return the named fields of ``record`` after checking that they exist and fit its length.

    Args:
        record: one image's predictions or targets.
        names: field names the metric ``kind`` reads.
        kind: metric kind, quoted in the message.

    Returns:
        The tensors, in the order of ``names``.

    Raises:
        MetricsInputError: a field is ``None``, has another row count than the record, or a
            trailing shape other than the module table's.
    """
    out: list[Tensor] = []
    n = len(record)
    owner = type(record).__name__
    for name in names:
        value = getattr(record, name)
        if value is None:
            raise MetricsInputError(
                f"metric kind {kind!r} reads {owner}.{name}, which is None: pass {name}=... "
                f"or drop {kind!r} from the metric's kinds"
            )
        if not isinstance(value, Tensor):
            raise MetricsInputError(
                f"{owner}.{name} must be a torch.Tensor, got {type(value).__name__!r}: "
                "convert it with torch.as_tensor"
            )
        expected = _TRAILING_SHAPES.get(name)
        trailing_ok = expected is None or tuple(value.shape[1:]) == expected
        if value.ndim < 1 or value.shape[0] != n or not trailing_ok:
            raise MetricsInputError(
                f"{owner}.{name} has shape {tuple(value.shape)!r} but the record has {n} rows: "
                f"expected ({n}, ...) as documented in lucid_yolo.train.metrics.image_instances"
            )
        out.append(value)
    return out


def _flags(value: Tensor | None, n: int, device: torch.device, default: bool = False) -> Tensor:
    if value is None:
        return torch.full((n,), default, dtype=torch.bool, device=device)
    if tuple(value.shape) != (n,):
        raise MetricsInputError(
            f"target flags have shape {tuple(value.shape)!r}, expected ({n},): one per instance"
        )
    return value.to(device=device, dtype=torch.bool)


__all__ = [
    "ImagePredictions",
    "ImageTargets",
    "MetricsInputError",
    "require_fields",
]
