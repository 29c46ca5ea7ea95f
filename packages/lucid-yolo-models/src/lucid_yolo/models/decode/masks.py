"""Instance masks from prototypes: linear combination, crop to the box, upsample.

An instance's mask logit map is ``coef · protos`` (YOLACT, Bolya et al. 2019) at stride 4.
Everything outside the instance's box is cleared, because a prototype combination is only
trained to be right inside its box.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def box_region(boxes: Tensor, height: int, width: int, scale: float = 1.0) -> Tensor:
    """Which pixels of a ``height × width`` grid have their centre inside each box.

    Args:
        boxes: (..., N, 4) ``xyxy`` in input pixels.
        height: grid rows.
        width: grid columns.
        scale: input pixels per grid cell (4 for prototype resolution).

    Returns:
        (..., N, height, width) bool.
    """
    ys = (torch.arange(height, device=boxes.device, dtype=boxes.dtype) + 0.5) * scale
    xs = (torch.arange(width, device=boxes.device, dtype=boxes.dtype) + 0.5) * scale
    x1, y1, x2, y2 = (boxes[..., i, None, None] for i in range(4))
    inside_x = (xs >= x1) & (xs < x2)  # (..., N, 1, W)
    inside_y = (ys[:, None] >= y1) & (ys[:, None] < y2)  # (..., N, H, 1)
    return inside_x & inside_y


def mask_probabilities(coef: Tensor, protos: Tensor, boxes: Tensor) -> Tensor:
    """Cropped mask probabilities at prototype resolution (static shapes; export-friendly).

    Args:
        coef: (B, N, M) coefficients.
        protos: (B, M, h, w) prototypes (stride 4).
        boxes: (B, N, 4) ``xyxy`` input pixels.

    Returns:
        (B, N, h, w) probabilities, 0 outside each box.
    """
    B, M, h, w = protos.shape
    logits = torch.bmm(coef, protos.reshape(B, M, h * w)).reshape(B, -1, h, w)
    stride = 4.0
    return logits.sigmoid() * box_region(boxes, h, w, stride).to(logits.dtype)


def assemble_masks(
    coef: Tensor, protos: Tensor, boxes: Tensor, image_size: tuple[int, int]
) -> Tensor:
    """Binary instance masks at input resolution for one image.

    The logits are upsampled (bilinear) to the input size first and cropped there, so mask
    edges on the box border are exact rather than 4-pixel steps.

    Args:
        coef: (N, M) coefficients.
        protos: (M, h, w) prototypes.
        boxes: (N, 4) ``xyxy`` input pixels.
        image_size: ``(H, W)`` of the network input.

    Returns:
        (N, H, W) bool.
    """
    M, h, w = protos.shape
    height, width = image_size
    if coef.shape[0] == 0:
        return torch.zeros(0, height, width, dtype=torch.bool, device=protos.device)
    logits = (coef @ protos.reshape(M, h * w)).reshape(1, -1, h, w)
    logits = F.interpolate(logits, size=(height, width), mode="bilinear", align_corners=False)
    return (logits[0] > 0) & box_region(boxes, height, width)


__all__ = ["assemble_masks", "box_region", "mask_probabilities"]
