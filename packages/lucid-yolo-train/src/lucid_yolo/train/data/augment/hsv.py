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
  triples, 98 MiB) and the device looks pixels up in them; the channel tables are
  computed in float64 as on the CPU. The result equals :func:`hsv_cpu` bit for bit wherever
  OpenCV converts a pixel with its vector code, which covers every pixel of an image whose width
  is a multiple of 32 (any network size; ``tests/train/data/test_augment_hsv.py``). OpenCV's
  scalar code for the last pixels of other row widths rounds HSV to RGB differently by at most
  one grey level (measured with OpenCV 5.0: up to 1 level on 74 % of random HSV triples), and so
  may the device there.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from lucid_yolo.train.data.augment.sample import UInt8Array
from lucid_yolo.train.exceptions import TrainConfigError

HUE_LEVELS = 180
"""OpenCV's 8-bit hue: degrees / 2."""

HUE_ROWS = HUE_LEVELS + 1
"""Hues :attr:`HsvTables.to_rgb` converts: a full turn and 180 itself, which a hue table holds
when a gain just below zero makes ``x * gain`` round up to 180 modulo 180 (reachable with a hue
amplitude above 1); OpenCV converts it as hue 0, so the CPU path does too."""

MAX_LOOKUP_IMAGES = 1 << 15
"""Images :func:`hsv_lookup` takes at once: image ``b``'s saturation-value table starts at
``b << 16`` in an int32 index."""

LOOKUP_BYTES_PER_PIXEL = 12
"""What :func:`hsv_lookup` holds a pixel at its peak: three int32 buffers."""

JITTER_TABLE_BYTES = (256 + (1 << 16)) * 4
"""One image's :class:`JitterTables` (257 KiB), whatever its size: as many bytes as the lookup's
temporaries for about 22,000 pixels, so small images are chunked by both."""


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
    """OpenCV's 8-bit RGB <-> HSV conversions as tables on one device, a pixel in one int32.

    A pixel travels as the int32 whose little-endian bytes are its three channels and a zero
    (:func:`hsv_lookup` builds it by viewing the bytes, so the host must be little-endian, as
    every CUDA device is). Int32 codes make the RGB -> HSV conversion and the jitter one
    element gathered a pixel each, by ``index_select`` with the int32 code itself as the index
    (advanced indexing would first copy an int32 index to int64); the HSV -> RGB rows stay
    three bytes, since they are the result.

    Attributes:
        to_hsv: (2^24,) int32: row ``r | g << 8 | b << 16`` holds OpenCV's HSV of that RGB
            triple as ``v | s << 8 | h << 16``.
        to_rgb: (:data:`HUE_ROWS` * 2^16, 3) uint8: row ``v | s << 8 | h << 16`` holds
            OpenCV's RGB of that HSV triple (the last lookup's result is the pixels, so three
            bytes a row do).
    """

    to_hsv: Tensor
    to_rgb: Tensor

    @classmethod
    def on(cls, device: torch.device) -> HsvTables:
        """The tables on ``device``, computed on the host at each call (0.13 s on the dev
        machine; :class:`~lucid_yolo.train.data.augment.DevicePixels` keeps them a fit long)."""
        if sys.byteorder != "little":
            raise TrainConfigError(
                "the device HSV jitter reads a pixel's bytes as one little-endian int32 and this "
                "host is big-endian; set `data.augment.pixels_on_device: false` to jitter in "
                "the loader workers"
            )
        to_hsv, to_rgb = _opencv_tables()
        return cls(
            to_hsv=torch.from_numpy(to_hsv).to(device), to_rgb=torch.from_numpy(to_rgb).to(device)
        )


@dataclass(frozen=True)
class JitterTables:
    """Each image's channel tables (:func:`hsv_cpu`'s ``luts``) laid out for
    :func:`hsv_lookup`: indexed by fields of :attr:`HsvTables.to_hsv`'s packed codes and valued
    in the packed codes :attr:`HsvTables.to_rgb` reads, so that a pixel's jittered code is the
    OR of two lookups.

    Attributes:
        hue: (B, 256) int32: row ``h`` of image ``b`` is its hue table's value ``<< 16``.
        saturation_value: (B, 2^16) int32: row ``v | s << 8`` of image ``b`` is
            ``lut_v[v] | lut_s[s] << 8``.
    """

    hue: Tensor
    saturation_value: Tensor


def hsv_on_device(images: Tensor, gains: Tensor, tables: HsvTables) -> Tensor:
    """Jitter a batch in HSV space on its own device, :func:`hsv_cpu` per image.

    No host synchronisation: every step is a gather or an elementwise op on the device. The
    whole batch at once; :class:`~lucid_yolo.train.data.augment.DevicePixels` runs the same two
    steps (:func:`jitter_tables`, :func:`hsv_lookup`) a few images at a time.

    Args:
        images: (B, 3, H, W) uint8 RGB.
        gains: (B, 3) float64 (h, s, v) gains per image (:func:`draw_hsv_gains`).
        tables: the conversions on ``images.device``.

    Returns:
        (B, 3, H, W) uint8 RGB, contiguous.
    """
    return hsv_lookup(images, jitter_tables(gains), tables).contiguous()


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


def jitter_tables(gains: Tensor) -> JitterTables:
    """:func:`hsv_luts` of ``gains`` laid out for :func:`hsv_lookup`.

    Raises:
        TrainConfigError: gains of more than :data:`MAX_LOOKUP_IMAGES` images (257 KiB of
            tables an image, and offsets past an int32 index).
    """
    if len(gains) > MAX_LOOKUP_IMAGES:
        raise TrainConfigError(
            f"the HSV lookup finishes at most {MAX_LOOKUP_IMAGES} images at once, got "
            f"{len(gains)}; finish the batch in chunks (DevicePixels' chunk_pixels)"
        )
    luts = hsv_luts(gains).int()
    hue = luts[:, 0].bitwise_left_shift(16)
    saturation = luts[:, 1, :, None].bitwise_left_shift(8)
    saturation_value = saturation.bitwise_or(luts[:, 2, None, :])  # (B, s, v)
    return JitterTables(hue.contiguous(), saturation_value.flatten(1))


def hsv_lookup(images: Tensor, jitter: JitterTables, tables: HsvTables) -> Tensor:
    """RGB -> HSV, each channel through its image's table, HSV -> RGB: four gathers.

    The RGB code is the images' bytes copied into a zeroed four-byte pixel and read as int32;
    the jittered HSV code is the OR of the image's hue lookup and its saturation-value lookup,
    each indexed by a field of the HSV code plus the image's offset into its flattened table;
    the last gather reads the RGB rows. Three int32 buffers the images' size serve the steps
    (:data:`LOOKUP_BYTES_PER_PIXEL`, beside the jitter tables' :data:`JITTER_TABLE_BYTES` an
    image); the index buffer goes before the last gather, whose three-byte rows can take its
    place.

    Args:
        images: (B, 3, H, W) uint8 RGB.
        jitter: the images' :class:`JitterTables` (:func:`jitter_tables`), one an image.
        tables: the conversions on ``images.device``.

    Returns:
        (B, 3, H, W) uint8 RGB in ``torch.channels_last`` layout (a view of the last lookup).
    """
    count, _, height, width = images.shape
    if jitter.hue.shape[0] != count:
        raise TrainConfigError(
            f"hsv_lookup got {count} images and jitter tables for {jitter.hue.shape[0]}; "
            "build them with jitter_tables(gains) from the same images' gains"
        )
    pixels = images.new_zeros(count, height, width, 4)
    pixels[..., :3] = images.permute(0, 2, 3, 1)
    codes = pixels.view(torch.int32).view(-1)  # RGB codes
    hsv = tables.to_hsv.index_select(0, codes)
    first = torch.arange(count, dtype=torch.int32, device=images.device)[:, None]
    index = hsv.bitwise_and(0xFFFF).view(count, height * width).add_(first << 16).view(-1)
    torch.index_select(jitter.saturation_value.view(-1), 0, index, out=codes)
    torch.bitwise_right_shift(hsv, 16, out=index).view(count, height * width).add_(first << 8)
    torch.index_select(jitter.hue.view(-1), 0, index, out=hsv)
    del index
    rgb = tables.to_rgb.index_select(0, codes.bitwise_or_(hsv))
    return rgb.view(count, height, width, 3).permute(0, 3, 1, 2)


def _opencv_tables() -> tuple[npt.NDArray[np.int32], UInt8Array]:
    """Every RGB triple converted to HSV and every HSV triple (h <= 180) to RGB by OpenCV, in
    :class:`HsvTables`' packed codes.

    Converted as images 4,096 and 1,024 pixels wide, so OpenCV's vector code converts every
    pixel, as it does every pixel of a network-size image. The bytes are moved between layouts
    by OpenCV too (``COLOR_RGBA2RGB``, ``mixChannels``), half the time of numpy's strided copies
    (0.13 against 0.25 s on the dev machine): the tables are built at a fit's first batch.
    """
    # a code's little-endian bytes are its (r, g, b) or (v, s, h) triple, then a zero
    codes = np.arange(2**24, dtype="<u4").view(np.uint8).reshape(4096, 4096, 4)
    rgb = cv2.cvtColor(codes, cv2.COLOR_RGBA2RGB)
    to_hsv = _packed(np.asarray(cv2.cvtColor(rgb, cv2.COLOR_RGB2HSV), np.uint8), (2, 1, 0))
    vsh = np.arange(HUE_ROWS << 16, dtype="<u4").view(np.uint8).reshape(-1, 1024, 4)
    hsv_rows = np.empty((*vsh.shape[:2], 3), np.uint8)
    cv2.mixChannels([vsh], [hsv_rows], [2, 0, 1, 1, 0, 2])
    back = np.asarray(cv2.cvtColor(hsv_rows, cv2.COLOR_HSV2RGB), np.uint8)
    return to_hsv, back.reshape(-1, 3)


def _packed(image: UInt8Array, channels: tuple[int, int, int]) -> npt.NDArray[np.int32]:
    """(H, W, 3) uint8 -> (H * W,) int32 ``c0 | c1 << 8 | c2 << 16`` of the channels named."""
    pixels = np.zeros((*image.shape[:2], 4), np.uint8)
    cv2.mixChannels([image], [pixels], [channels[0], 0, channels[1], 1, channels[2], 2])
    return pixels.view("<i4").reshape(-1).astype(np.int32, copy=False)


__all__ = [
    "HUE_LEVELS",
    "JITTER_TABLE_BYTES",
    "LOOKUP_BYTES_PER_PIXEL",
    "MAX_LOOKUP_IMAGES",
    "HsvTables",
    "JitterTables",
    "draw_hsv_gains",
    "hsv_cpu",
    "hsv_lookup",
    "hsv_luts",
    "hsv_on_device",
    "jitter_tables",
]
