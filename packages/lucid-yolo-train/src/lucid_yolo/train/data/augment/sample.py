"""One image and its instances in pixel space, the unit every augmentation transforms.

:class:`~lucid_yolo.train.data.labels.ImageLabels` stores geometry normalised to the source image,
which is right for storage but wrong for augmentation: mosaic, affine warps and flips act on pixels
of a specific canvas. A :class:`Sample` carries the image and every geometry of every task in pixels
of that image, so one transform updates all of them together and they cannot drift apart:

==============  ===================  =========================================================
field           shape                meaning
==============  ===================  =========================================================
``image``       (H, W, 3) uint8      RGB
``classes``     (n,) int64           class ids
``boxes``       (n, 4) float32       ``xyxy`` pixels, clipped to the image
``polygons``    n x (p_i, 2) float32 segment only: ``xy`` pixels (may reach past the image)
``keypoints``   (n, K, 3) float32    pose only: ``xy`` pixels + visibility 0/1/2 (0 => xy = 0)
``corners``     (n, 4, 2) float32    obb only: rotated-box corners, pixels (may reach past)
``ignore``      (n,) bool            instances metrics ignore (DOTA difficult, COCO crowds kept
                                     with ``crowd="ignore"``); ``None`` = none
``deferred``    DeferredPixels       pixel work drawn for the sample but left for the training
                                     device (``AugmentConfig.pixels_on_device``); ``None`` = none
==============  ===================  =========================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from lucid_yolo.train.data.labels import BoolArray, FloatArray, ImageLabels, IntArray

UInt8Array = npt.NDArray[np.uint8]


@dataclass
class DropCounts:
    """Instances removed by augmentation, by reason, so that no loss is silent.

    Attributes:
        too_small: the visible box became narrower or shorter than the minimum size.
        outside: less than the minimum fraction of the warped box stayed inside the image.
        degenerate: the visible box became a sliver (aspect ratio above the maximum).
    """

    too_small: int = 0
    outside: int = 0
    degenerate: int = 0

    def total(self) -> int:
        """All dropped instances."""
        return self.too_small + self.outside + self.degenerate

    def add(self, other: DropCounts) -> None:
        """Accumulate another sample's counts in place."""
        self.too_small += other.too_small
        self.outside += other.outside
        self.degenerate += other.degenerate


@dataclass(frozen=True)
class DeferredPixels:
    """Pixel augmentations drawn in a worker and applied on the training device.

    The sample's labels already show them (a deferred flip has mirrored the geometry); only the
    pixels wait (:class:`~lucid_yolo.train.data.augment.device_pixels.DevicePixels`).

    Attributes:
        hsv_gains: (3,) float64 (h, s, v) gains, or ``None`` when HSV jitter is off.
        flip: whether the image is still to be mirrored left-right.
    """

    hsv_gains: npt.NDArray[np.float64] | None
    flip: bool


@dataclass
class Sample:
    """An image and its instances in pixel space; see the module docstring for the fields.

    Attributes:
        image_id: index of the primary image in its dataset (mosaic keeps the first tile's).
        orig_size: (height, width) of the primary source image.
        scale_pad: (scale, pad_x, pad_y) with input px = source px * scale + pad; exact for the
            letterbox path (validation), the load resize only once geometric augmentation ran.
        drops: instances removed by augmentation so far.
    """

    image: UInt8Array
    classes: IntArray
    boxes: FloatArray
    polygons: list[FloatArray] | None = None
    keypoints: FloatArray | None = None
    corners: FloatArray | None = None
    ignore: BoolArray | None = None
    image_id: int = 0
    orig_size: tuple[int, int] = (0, 0)
    scale_pad: tuple[float, float, float] = (1.0, 0.0, 0.0)
    drops: DropCounts = field(default_factory=DropCounts)
    deferred: DeferredPixels | None = None

    def __len__(self) -> int:
        return int(self.classes.shape[0])

    @property
    def height(self) -> int:
        """Image height in pixels."""
        return int(self.image.shape[0])

    @property
    def width(self) -> int:
        """Image width in pixels."""
        return int(self.image.shape[1])

    def ignore_flags(self) -> BoolArray:
        """(n,) bool: the ``ignore`` flags, all ``False`` when the sample has none."""
        if self.ignore is None:
            return np.zeros(len(self), dtype=np.bool_)
        return self.ignore

    def select(self, keep: BoolArray | IntArray) -> Sample:
        """Keep the instances chosen by a boolean mask or an index array, in that order."""
        index = np.flatnonzero(keep) if keep.dtype == np.bool_ else keep
        return replace(
            self,
            classes=self.classes[index],
            boxes=self.boxes[index],
            polygons=None if self.polygons is None else [self.polygons[i] for i in index],
            keypoints=None if self.keypoints is None else self.keypoints[index],
            corners=None if self.corners is None else self.corners[index],
            ignore=None if self.ignore is None else self.ignore[index],
        )

    def with_instances_of(self, other: Sample) -> Sample:
        """This sample with ``other``'s instances appended (same canvas, same tasks)."""
        return replace(
            self,
            classes=np.concatenate([self.classes, other.classes]),
            boxes=np.concatenate([self.boxes, other.boxes]),
            polygons=_cat_list(self.polygons, other.polygons),
            keypoints=_cat_optional(self.keypoints, other.keypoints),
            corners=_cat_optional(self.corners, other.corners),
            ignore=None
            if self.ignore is None and other.ignore is None
            else np.concatenate([self.ignore_flags(), other.ignore_flags()]),
        )


def sample_from_labels(
    image: UInt8Array, labels: ImageLabels, image_id: int, orig_size: tuple[int, int]
) -> Sample:
    """Scale normalised labels to the pixels of ``image`` (which may be a resized source).

    Args:
        image: (H, W, 3) uint8 RGB, the source image possibly resized with its aspect kept.
        labels: the image's normalised annotations.
        image_id: index of the image in its dataset.
        orig_size: (height, width) of the source image before any resize.

    Returns:
        The sample, ``scale_pad`` = (long side / source long side, 0, 0). The labels scale by
        that one ratio on both axes, as the pixels do
        (:func:`~lucid_yolo.train.data.augment.letterbox.resize_long_side`), not by the resized
        image's own width and height: the short side's pixel count is rounded, its scale is not.
    """
    h, w = image.shape[:2]
    scale = max(h, w) / max(orig_size)
    wh = np.array([orig_size[1] * scale, orig_size[0] * scale], dtype=np.float32)
    boxes = (labels.boxes.reshape(-1, 2, 2) * wh).reshape(-1, 4).astype(np.float32)
    keypoints = None
    if labels.keypoints is not None:
        keypoints = labels.keypoints.astype(np.float32, copy=True)
        keypoints[..., :2] *= wh
    return Sample(
        image=image,
        classes=labels.classes.astype(np.int64, copy=False),
        boxes=boxes,
        polygons=None
        if labels.polygons is None
        else [(p * wh).astype(np.float32) for p in labels.polygons],
        keypoints=keypoints,
        corners=None if labels.corners is None else (labels.corners * wh).astype(np.float32),
        ignore=None if labels.difficult is None else labels.difficult.astype(np.bool_, copy=True),
        image_id=image_id,
        orig_size=orig_size,
        scale_pad=(scale, 0.0, 0.0),
    )


def _cat_optional(a: FloatArray | None, b: FloatArray | None) -> FloatArray | None:
    if a is None and b is None:
        return None
    assert a is not None, "samples of one dataset carry the same task fields"
    assert b is not None, "samples of one dataset carry the same task fields"
    return np.concatenate([a, b])


def _cat_list(a: list[FloatArray] | None, b: list[FloatArray] | None) -> list[FloatArray] | None:
    if a is None and b is None:
        return None
    assert a is not None, "samples of one dataset carry the same task fields"
    assert b is not None, "samples of one dataset carry the same task fields"
    return [*a, *b]


__all__ = ["DeferredPixels", "DropCounts", "Sample", "UInt8Array", "sample_from_labels"]
