"""The batch contract: targets travel as padded dense tensors.

Every task's batch has the same fixed shape for the whole run (``N`` = ``max_instances``, fixed by
the data module), so the assigner and the loss can run with static shapes and, later, inside a CUDA
graph. Instance ``j`` of image ``i`` is real iff ``valid[i, j]``; padded rows hold zeros and class
``-1``. Geometry is in pixels of the network input (after letterbox/augmentation).

=================  =================  ================  ==========================================
key                shape              dtype             meaning
=================  =================  ================  ==========================================
``images``         (B, 3, H, W)       uint8             RGB, not normalised (the module scales)
``classes``        (B, N)             int64             class id, ``-1`` where not valid
``valid``          (B, N)             bool              real instance mask
``ignore``         (B, N)             bool              real instances that metrics ignore (DOTA
                                                        difficult, COCO crowds kept as "ignore");
                                                        the loss trains on DOTA difficult ones as
                                                        on any other; COCO crowds are only in
                                                        evaluation batches
``boxes``          (B, N, 4)          float32           ``xyxy`` pixels (for OBB: the rotated box's
                                                        axis-aligned hull)
``masks``          (B, N, H/4, W/4)   uint8             segment only: instance masks at prototype
                                                        resolution, 0/1
``keypoints``      (B, N, K, 3)       float32           pose only: x, y pixels, visibility 0/1/2
``rboxes``         (B, N, 5)          float32           obb only: ``xywhr`` pixels, radians,
                                                        long-edge convention, r in [-pi/4, 3pi/4)
``image_ids``      (B,)               int64             index of the image in its dataset
``orig_sizes``     (B, 2)             int64             (height, width) of the source image
``scale_pad``      (B, 3)             float32           (scale, pad_x, pad_y): input px =
                                                        source px * scale + pad
=================  =================  ================  ==========================================

Training batches whose pixel augmentations were left to the device
(``AugmentConfig.pixels_on_device``) also carry, from the loader to the device only,
``deferred_hsv`` (B, 3) float64 HSV gains and ``deferred_flip`` (B,) bool, and segment batches
bring ``deferred_masks`` (B, N, H/4, W/32) uint8, the masks bit-packed along their width, in
place of ``masks``; the data module applies the first two to ``images`` and unpacks the masks
once the batch is on the device, and removes the three keys
(:mod:`~lucid_yolo.train.data.augment.device_pixels`), so a training step never sees them.

Segment batches built for evaluation (no augmentation) also carry ``source_shapes``: per image,
one ground truth in *source* pixels per valid instance, in row order, which the mask metric turns
into a mask at the source size: the annotation's RLE where it was given as one
(:class:`~lucid_yolo.train.geometry.RunLengthMask`), else its (p, 2) float64 numpy polygon. It is
the one field that is not a tensor.
"""

from __future__ import annotations

from typing import Final, NotRequired, TypedDict

from torch import Tensor

from lucid_yolo.train.geometry import SourceShape


class Batch(TypedDict):
    """One collated batch; see the module docstring for shapes and units."""

    images: Tensor
    classes: Tensor
    valid: Tensor
    boxes: Tensor
    image_ids: Tensor
    orig_sizes: Tensor
    scale_pad: Tensor
    ignore: NotRequired[Tensor]
    masks: NotRequired[Tensor]
    keypoints: NotRequired[Tensor]
    rboxes: NotRequired[Tensor]
    source_shapes: NotRequired[list[list[SourceShape]]]
    deferred_hsv: NotRequired[Tensor]
    deferred_flip: NotRequired[Tensor]
    deferred_masks: NotRequired[Tensor]


HOST_FIELDS: Final = frozenset({"source_shapes"})
"""The fields that stay on the host when a batch moves to its device."""

__all__ = ["HOST_FIELDS", "Batch"]
