"""HSV colour jitter: random multiplicative gains on hue, saturation and value.

Each image draws ``gain_c = 1 + U(-1, 1) * amplitude_c`` for c in (h, s, v) (YOLO defaults
0.015 / 0.7 / 0.4). Hue is rotated modulo a full turn, saturation and value are clipped to range.

Two implementations:

* :func:`hsv_cpu` on (H, W, 3) uint8 with OpenCV's 8-bit HSV (hue in [0, 180)) and lookup tables,
  for the worker-side pipeline;
* :func:`hsv_on_device` on a (B, 3, H, W) batch already on the accelerator, in float, with gains
  drawn from a torch generator on that device, no host synchronisation and no host-built tensors
  (so it can sit inside a CUDA graph), for the Lightning module
  to call after transfer (``AugmentConfig.hsv_on_device``). It quantises differently from the CPU
  path (float hue instead of 180 bins), so the two agree to a few grey levels, not bitwise.
"""

from __future__ import annotations

import cv2
import numpy as np
import torch
from torch import Tensor

from lucid_yolo.train.data.augment.sample import UInt8Array


def hsv_cpu(
    image: UInt8Array, gains: tuple[float, float, float], rng: np.random.Generator
) -> UInt8Array:
    """Jitter an RGB uint8 image in HSV space.

    Args:
        image: (H, W, 3) uint8 RGB.
        gains: amplitudes (h, s, v); all zero returns the image unchanged.
        rng: random source.

    Returns:
        (H, W, 3) uint8 RGB.
    """
    if not any(gains):
        return image
    r = rng.uniform(-1.0, 1.0, 3) * np.asarray(gains) + 1.0
    hue, sat, val = cv2.split(cv2.cvtColor(image, cv2.COLOR_RGB2HSV))
    x = np.arange(256, dtype=np.float64)
    lut_hue = np.mod(x * r[0], 180).astype(np.uint8)
    lut_sat = np.clip(x * r[1], 0, 255).astype(np.uint8)
    lut_val = np.clip(x * r[2], 0, 255).astype(np.uint8)
    hsv = cv2.merge((cv2.LUT(hue, lut_hue), cv2.LUT(sat, lut_sat), cv2.LUT(val, lut_val)))
    return np.asarray(cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB), dtype=np.uint8)


def hsv_on_device(
    images: Tensor, gains: tuple[float, float, float], generator: torch.Generator | None = None
) -> Tensor:
    """Jitter a batch in HSV space on its own device, one random gain triple per image.

    Args:
        images: (B, 3, H, W) RGB, uint8 in [0, 255] or floating in [0, 1].
        gains: amplitudes (h, s, v).
        generator: torch generator on ``images.device`` (``None``: the default generator).

    Returns:
        (B, 3, H, W) of the input's dtype and range.
    """
    if not any(gains):
        return images
    B = images.shape[0]
    x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
    u = torch.rand((B, 3, 1, 1), generator=generator, device=images.device) * 2 - 1
    h, s, v = _rgb_to_hsv(x)
    h = torch.remainder(h * (u[:, 0:1] * gains[0] + 1), 1.0)
    s = (s * (u[:, 1:2] * gains[1] + 1)).clamp_(0, 1)
    v = (v * (u[:, 2:3] * gains[2] + 1)).clamp_(0, 1)
    out = _hsv_to_rgb(h, s, v)
    if images.dtype == torch.uint8:
        return (out * 255).round_().clamp_(0, 255).to(torch.uint8)
    return out.to(images.dtype)


def _rgb_to_hsv(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(B, 3, H, W) RGB in [0, 1] -> three (B, 1, H, W) h, s, v in [0, 1]."""
    red, green, blue = x[:, 0:1], x[:, 1:2], x[:, 2:3]
    v = x.amax(dim=1, keepdim=True)
    c = v - x.amin(dim=1, keepdim=True)
    s = torch.where(v > 0, c / v.clamp(min=1e-12), torch.zeros_like(v))
    safe_c = c.clamp(min=1e-12)
    h_r = torch.remainder((green - blue) / safe_c, 6.0)
    h_g = (blue - red) / safe_c + 2.0
    h_b = (red - green) / safe_c + 4.0
    h = torch.where(v == red, h_r, torch.where(v == green, h_g, h_b))
    h = torch.where(c > 0, h / 6.0, torch.zeros_like(h))
    return h, s, v


def _hsv_to_rgb(h: Tensor, s: Tensor, v: Tensor) -> Tensor:
    """Three (B, 1, H, W) h, s, v in [0, 1] -> (B, 3, H, W) RGB in [0, 1]."""
    h6 = h * 6.0
    k = torch.remainder(torch.cat([h6 + 5.0, h6 + 3.0, h6 + 1.0], dim=1), 6.0)  # (B, 3, H, W)
    ramp = torch.minimum(k, 4.0 - k).clamp(0, 1)
    return v - v * s * ramp


__all__ = ["hsv_cpu", "hsv_on_device"]
