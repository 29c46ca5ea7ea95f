"""A batch's mask overlaps with its images grouped into padded frames (GPU validation).

An image's masks are at its own source size, so the metric used to compute their overlaps
image by image: some thirty kernel launches per image for the product, the areas, the division
and putting the result in place, which made the mask overlaps about a fifth of a segment
validation pass on the H200, a pass bound by the host's launches (issue 11, session 24). Here
consecutive images are padded into one frame and scored together
(:func:`~lucid_yolo.train.metrics.overlaps.padded_mask_overlaps`, exact whatever the padding),
as many at a time as fit :data:`GROUP_BYTES` of padded masks, so that memory stays bounded as
it was: a group never holds more than that budget or one image's masks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from lucid_yolo.train.metrics.batch_instances import ImageMasks
from lucid_yolo.train.metrics.overlaps import check_mask_sizes, padded_mask_overlaps

GROUP_BYTES = 1 << 28
"""Padded mask bytes (one per pixel, predictions and targets) a group of images may hold."""


@dataclass(frozen=True)
class _ImageMasks:
    """One image's masks and the rows and columns of the batch they belong to."""

    predictions: Tensor  # (r, H, W)
    rows: Tensor  # (r,) int64
    targets: Tensor  # (t, H, W)
    columns: Tensor  # (t,) int64


def grouped_mask_overlaps(
    shape: tuple[int, int, int],
    prediction_masks: ImageMasks,
    target_masks: ImageMasks,
    crowd: Tensor,
) -> Tensor:
    """(B, D, G) float64: each image's mask overlaps at its rows and columns, -1 elsewhere.

    Args:
        shape: ``(B, D, G)``: images, prediction rows and target rows of the batch.
        prediction_masks: per image, its masks and the prediction rows they belong to.
        target_masks: per image, its masks and the target rows they belong to.
        crowd: (B, G) bool, COCO crowd flag per target row, on the device the overlaps go to.
    """
    B, D, G = shape
    device = crowd.device
    # one spare row and column: where the padding of a group's rows and columns is written
    overlaps = torch.full((B, D + 1, G + 1), -1.0, dtype=torch.float64, device=device)
    crowd = F.pad(crowd.to(torch.bool), (0, 1))
    group: list[_ImageMasks] = []
    first = 0
    for i in range(B):
        (predictions, rows), (targets, columns) = prediction_masks(i), target_masks(i)
        check_mask_sizes(predictions, targets)
        image = _ImageMasks(predictions, rows.to(device), targets, columns.to(device))
        if group and _padded_bytes([*group, image]) > GROUP_BYTES:
            _score(group, overlaps[first:i], crowd[first:i])
            group, first = [], i
        group.append(image)
    if group:
        _score(group, overlaps[first:], crowd[first:])
    return overlaps[:, :D, :G]


def _padded_bytes(group: list[_ImageMasks]) -> int:
    rows = max(image.predictions.shape[0] for image in group)
    columns = max(image.targets.shape[0] for image in group)
    height, width = _frame(group)
    return len(group) * (rows + columns) * height * width


def _frame(group: list[_ImageMasks]) -> tuple[int, int]:
    return (
        max(image.predictions.shape[1] for image in group),
        max(image.predictions.shape[2] for image in group),
    )


def _score(group: list[_ImageMasks], overlaps: Tensor, crowd: Tensor) -> None:
    """Write the group's overlaps into ``overlaps`` (g, D + 1, G + 1) at their rows and columns."""
    D, G = overlaps.shape[1] - 1, overlaps.shape[2] - 1
    height, width = _frame(group)
    predictions = _padded([image.predictions for image in group], height, width)
    targets = _padded([image.targets for image in group], height, width)
    rows = pad_sequence([image.rows for image in group], batch_first=True, padding_value=D)
    columns = pad_sequence([image.columns for image in group], batch_first=True, padding_value=G)
    values = padded_mask_overlaps(predictions, targets, crowd.gather(1, columns))
    images = torch.arange(len(group), device=overlaps.device)
    overlaps[images[:, None, None], rows[:, :, None], columns[:, None, :]] = values


def _padded(masks: list[Tensor], height: int, width: int) -> Tensor:
    """(len(masks), most rows, height, width) bool: each image's masks in its top-left corner."""
    if len(masks) == 1 and tuple(masks[0].shape[1:]) == (height, width):
        return masks[0][None]
    rows = max(part.shape[0] for part in masks)
    out = torch.zeros(len(masks), rows, height, width, dtype=torch.bool, device=masks[0].device)
    for k, part in enumerate(masks):
        out[k, : part.shape[0], : part.shape[1], : part.shape[2]] = part.to(out.device)
    return out


__all__ = ["GROUP_BYTES", "grouped_mask_overlaps"]
