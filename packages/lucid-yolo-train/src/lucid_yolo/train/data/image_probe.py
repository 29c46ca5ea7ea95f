"""Cheap image validity and size probe, read from the file's header and tail.

Decoding every image to validate a dataset costs as much as a training epoch, so JPEG, PNG and BMP
(the formats datasets use in practice) are checked from their bytes: the magic number, the size
fields of the header (JPEG: the first SOF segment; PNG: IHDR; BMP: the info header) and, for JPEG
and PNG, the end marker (``FFD9`` / ``IEND``) near the end of the file, which catches the common
corruption of a truncated download or copy. Any other extension (TIFF, WebP, ...) is decoded with
OpenCV in full. A probe does not prove the entropy-coded data is intact; the loader that decodes
the image still reports a failure with the file name.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from lucid_yolo.train.data.errors import ImageReadError, path_text

IMAGE_SUFFIXES: frozenset[str] = frozenset(
    {".bmp", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp"}
)
"""File extensions (lower case) that count as images when a split folder is listed."""

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_PNG_END = b"IEND\xaeB`\x82"
_JPEG_EOI = b"\xff\xd9"
_TAIL_BYTES = 1024
_HEAD_BYTES = 64 * 1024
# Start-of-frame markers carry the image size; C4 (DHT), C8 (JPG) and CC (DAC) share the range.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers without a length field (TEM, RST0-7); everything else is followed by a 2-byte length.
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})


def _jpeg_size(data: bytes) -> tuple[int, int] | str | None:
    """Size from the first SOF segment; ``None`` when ``data`` ends before one is reached."""
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return f"JPEG marker expected at byte {pos}, found {data[pos]:#04x}"
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker in _JPEG_STANDALONE:
            pos += 2
            continue
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if marker in _JPEG_SOF:
            if pos + 9 > len(data):
                break
            height = int.from_bytes(data[pos + 5 : pos + 7], "big")
            width = int.from_bytes(data[pos + 7 : pos + 9], "big")
            return height, width
        pos += 2 + length
    return None


def _probe_bytes(path: Path, data: bytes, tail: bytes) -> tuple[int, int] | str:
    suffix = path.suffix.lower()
    if data.startswith(b"\xff\xd8"):
        size = _jpeg_size(data)
        if size is None and len(data) == _HEAD_BYTES:
            size = _jpeg_size(path.read_bytes())
        if size is None:
            return "no JPEG frame header (SOF) found: the file is truncated or not a JPEG"
        if isinstance(size, tuple) and _JPEG_EOI not in tail:
            return "JPEG end marker FFD9 missing: the file is truncated"
        return size
    if data.startswith(_PNG_MAGIC):
        if len(data) < 24 or data[12:16] != b"IHDR":
            return "PNG header (IHDR) missing: the file is truncated or corrupt"
        if not tail.endswith(_PNG_END):
            return "PNG end chunk IEND missing: the file is truncated"
        return int.from_bytes(data[20:24], "big"), int.from_bytes(data[16:20], "big")
    if data.startswith(b"BM") and len(data) >= 26:
        width = int.from_bytes(data[18:22], "little", signed=True)
        height = int.from_bytes(data[22:26], "little", signed=True)
        return abs(height), width
    if suffix in {".jpg", ".jpeg", ".png", ".bmp"}:
        return f"content is not a {suffix[1:].upper()} image (first bytes {data[:8]!r})"
    decoded = cv2.imdecode(np.frombuffer(path.read_bytes(), np.uint8), cv2.IMREAD_UNCHANGED)
    if decoded is None:
        return "OpenCV cannot decode it"
    return int(decoded.shape[0]), int(decoded.shape[1])


def probe_image(path: Path) -> tuple[int, int]:
    """Validate an image cheaply and return its size.

    Args:
        path: the image file.

    Returns:
        ``(height, width)`` in pixels, from the header.

    Raises:
        ImageReadError: the file is missing, empty, truncated, not an image, or has a zero size;
            the message names the file and says what is wrong.
    """
    try:
        with path.open("rb") as handle:
            data = handle.read(_HEAD_BYTES)
            size_bytes = handle.seek(0, 2)
            handle.seek(max(0, size_bytes - _TAIL_BYTES))
            tail = handle.read()
    except OSError as error:
        raise ImageReadError(
            f"{path_text(path)}: cannot read the image ({error.strerror}); check the path"
        ) from None
    if not data:
        raise ImageReadError(f"{path_text(path)}: the image file is empty; replace or remove it")
    result = _probe_bytes(path, data, tail)
    if isinstance(result, str):
        raise ImageReadError(f"{path_text(path)}: {result}; replace or remove the image")
    height, width = result
    if height <= 0 or width <= 0:
        raise ImageReadError(
            f"{path_text(path)}: header says the image is {width!r}x{height!r} pixels; "
            "replace the image"
        )
    return height, width


__all__ = ["IMAGE_SUFFIXES", "probe_image"]
