"""HSV colour jitter: random multiplicative gains on hue, saturation and value.

Each image draws ``gain_c = 1 + U(-1, 1) * amplitude_c`` for c in (h, s, v) (YOLO defaults
0.015 / 0.7 / 0.4) from its own random stream (:func:`draw_hsv_gains`). The jitter itself is
OpenCV's 8-bit HSV (hue in [0, 180)): convert, map each channel through a lookup table (hue
rotated modulo a full turn, saturation and value clipped to range, values truncated as
``astype(uint8)`` does), convert back.

Two implementations of the same function:

* :func:`hsv_cpu` on one (H, W, 3) image with OpenCV, in the loader workers;
* :func:`hsv_on_device` on a (B, 3, H, W) batch on any torch device, one gain triple per image.
  Both colour conversions are functions of a pixel's three bytes alone, so :class:`HsvTables`
  evaluates OpenCV's own conversions once for every input (2^24 RGB and 180 x 256 x 256 HSV
  triples, 83 MB) and the device looks pixels up in them; the lookup tables are computed in float64
  as on the CPU. The result equals :func:`hsv_cpu` bit for bit wherever OpenCV converts a pixel
  with its vector code, which covers every pixel of an image whose width is a multiple of 32 (any
  network size; ``tests/train/data/test_augment_hsv.py``). OpenCV's scalar code for the last
  pixels of other row widths rounds HSV to RGB differently by at most one grey level (measured
  with OpenCV 5.0: up to 1 level on 74 % of random HSV triples), and so may the device there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from lucid_yolo.train.data.augment.sample import UInt8Array

HUE_LEVELS = 180
"""OpenCV's 8-bit hue: degrees / 2."""


def draw_hsv_gains(
    amplitudes: tuple[float, float, float], rng: np.random.Generator
) -> npt.NDArray[np.float64] | None:
    """One image's (h, s, v) gains, or ``None`` (and no draw) when every amplitude is 0."""
    if not any(amplitudes):
        return None
    gains: npt.NDArray[np.float64] = rng.uniform(-1.0, 1.0, 3) * np.asarray(amplitudes) + 1.0
    return gains


def hsv_cpu(image: UInt8Array, gains: npt.NDArray[np.float64]) -> UInt8Array:
    """Jitter an RGB uint8 image in HSV space with OpenCV.

    Args:
        image: (H, W, 3) uint8 RGB.
        gains: (3,) float64 (h, s, v) gains from :func:`draw_hsv_gains`.

    Returns:
        (H, W, 3) uint8 RGB.
    """
    channels = cv2.split(cv2.cvtColor(image, cv2.COLOR_RGB2HSV))
    scaled = np.arange(256, dtype=np.float64) * gains[:, None]  # (3, 256)
    luts = (
        np.mod(scaled[0], HUE_LEVELS).astype(np.uint8),
        np.clip(scaled[1], 0, 255).astype(np.uint8),
        np.clip(scaled[2], 0, 255).astype(np.uint8),
    )
    hsv = cv2.merge([cv2.LUT(channel, lut) for channel, lut in zip(channels, luts, strict=True)])
    return np.asarray(cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB), dtype=np.uint8)


@dataclass(frozen=True)
class HsvTables:
    """OpenCV's 8-bit RGB <-> HSV conversions as tables on one device.

    Attributes:
        to_hsv: (2^24, 3) uint8, row ``r << 16 | g << 8 | b`` = OpenCV's HSV of that RGB triple.
        to_rgb: (180 * 2^16, 3) uint8, row ``(h << 8 | s) << 8 | v`` = OpenCV's RGB of that HSV.
    """

    to_hsv: Tensor
    to_rgb: Tensor

    @classmethod
    def on(cls, device: torch.device) -> HsvTables:
        """The tables on ``device`` (computed on the host once per process, ~1 s)."""
        to_hsv, to_rgb = _opencv_tables()
        return cls(
            to_hsv=torch.from_numpy(to_hsv).to(device), to_rgb=torch.from_numpy(to_rgb).to(device)
        )


def hsv_on_device(images: Tensor, gains: Tensor, tables: HsvTables) -> Tensor:
    """Jitter a batch in HSV space on its own device, :func:`hsv_cpu` per image.

    No host synchronisation: every step is a gather or an elementwise op on the device. The
    whole batch at once; :class:`~lucid_yolo.train.data.augment.DevicePixels` runs the same two
    steps (:func:`hsv_luts`, :func:`hsv_lookup`) a few images at a time.

    Args:
        images: (B, 3, H, W) uint8 RGB.
        gains: (B, 3) float64 (h, s, v) gains per image (:func:`draw_hsv_gains`).
        tables: the conversions on ``images.device``.

    Returns:
        (B, 3, H, W) uint8 RGB, contiguous.
    """
    return hsv_lookup(images, hsv_luts(gains), tables).contiguous()


def hsv_luts(gains: Tensor) -> Tensor:
    """Each image's channel tables, as :func:`hsv_cpu` builds them.

    Args:
        gains: (B, 3) float64 (h, s, v) gains per image.

    Returns:
        (B, 3, 256) uint8: row ``c`` of image ``b`` maps a value of channel ``c``.
    """
    levels = torch.arange(256, dtype=torch.float64, device=gains.device)
    scaled = levels * gains[:, :, None]  # (B, 3, 256)
    return torch.cat(
        [torch.remainder(scaled[:, 0:1], HUE_LEVELS), scaled[:, 1:3].clamp(0, 255)], dim=1
    ).to(torch.uint8)  # truncates, as numpy's astype


def hsv_lookup(images: Tensor, luts: Tensor, tables: HsvTables) -> Tensor:
    """RGB -> HSV, each channel through its image's table, HSV -> RGB: three table lookups.

    Pixels travel as one int32 code each, built and rebuilt in place in one buffer. The channel
    tables are read one channel at a time with an int64 index: with one int32 index for all
    three, the H200's allocator peaked 18.7 MiB above the tensors' own bytes for two 640 px
    images, about one int64 copy of that index. The temporaries come to about 18 bytes per
    pixel.

    Args:
        images: (B, 3, H, W) uint8 RGB.
        luts: (B, 3, 256) uint8 contiguous, from :func:`hsv_luts`.
        tables: the conversions on ``images.device``.

    Returns:
        (B, 3, H, W) uint8 RGB in ``torch.channels_last`` layout (a view of the last lookup).
    """
    codes = _pixel_codes(images.unbind(1))  # (B, H, W) int32 RGB codes
    hsv = tables.to_hsv[codes]  # (B, H, W, 3)
    # element (b * 3 + c) * 256 + value of the flattened tables: image b's channel c
    offsets = torch.arange(0, luts.numel(), 256, device=luts.device).view(-1, 3, 1, 1)
    flat = luts.view(-1)
    jittered = [flat[hsv[..., c].long().add_(offsets[:, c])] for c in range(3)]  # 3 x (B, H, W)
    del hsv
    rgb = tables.to_rgb[_pixel_codes(jittered, into=codes)]  # (B, H, W, 3)
    return rgb.permute(0, 3, 1, 2)


def _pixel_codes(channels: Sequence[Tensor], into: Tensor | None = None) -> Tensor:
    """``c0 << 16 | c1 << 8 | c2`` as int32 from three uint8 planes of one shape, built in
    ``into`` (int32, that shape) when given: the row of a pixel in :class:`HsvTables`."""
    first, second, third = channels
    codes = first.int() if into is None else into.copy_(first)
    codes.bitwise_left_shift_(8).bitwise_or_(second)
    return codes.bitwise_left_shift_(8).bitwise_or_(third)


def _opencv_tables() -> tuple[UInt8Array, UInt8Array]:
    """Every RGB triple converted to HSV and every HSV triple (h < 180) to RGB by OpenCV.

    Converted as images 4,096 and 1,024 pixels wide, so OpenCV's vector code converts every
    pixel, as it does every pixel of a network-size image.
    """
    # little-endian bytes of the code, reversed: (code >> 16, code >> 8 & 255, code & 255)
    rgb = np.arange(2**24, dtype=np.uint32).view(np.uint8).reshape(-1, 4)[:, 2::-1]
    to_hsv = cv2.cvtColor(np.ascontiguousarray(rgb).reshape(4096, 4096, 3), cv2.COLOR_RGB2HSV)
    hsv = np.arange(HUE_LEVELS << 16, dtype=np.uint32).view(np.uint8).reshape(-1, 4)[:, 2::-1]
    to_rgb = cv2.cvtColor(np.ascontiguousarray(hsv).reshape(-1, 1024, 3), cv2.COLOR_HSV2RGB)
    return np.asarray(to_hsv, np.uint8).reshape(-1, 3), np.asarray(to_rgb, np.uint8).reshape(-1, 3)


__all__ = [
    "HUE_LEVELS",
    "HsvTables",
    "draw_hsv_gains",
    "hsv_cpu",
    "hsv_lookup",
    "hsv_luts",
    "hsv_on_device",
]
