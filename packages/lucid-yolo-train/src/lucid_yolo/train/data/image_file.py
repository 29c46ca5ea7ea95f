"""Image files read and written through Python's file API, coded in memory by OpenCV.

OpenCV never gets a path: ``cv2.imread`` or ``cv2.imwrite`` on a file name that is not valid
UTF-8 (lone surrogates in Python, PEP 383) crashes the process with a segfault (issue 15), while
Python opens any name the file system holds. Decoding from memory gives the same pixels as
``cv2.imread``, EXIF orientation included. Training, ``data check`` and ``predict`` all read and
write images here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from lucid_yolo.train.data.augment.sample import UInt8Array
from lucid_yolo.train.data.errors import ImageReadError, path_text


def read_image(path: Path) -> UInt8Array:
    """Decode an image file as OpenCV's BGR colour image.

    Args:
        path: image file.

    Returns:
        (h, w, 3) uint8 BGR at the file's resolution.

    Raises:
        ImageReadError: the file is missing or OpenCV cannot decode it.
    """
    try:
        encoded = np.frombuffer(path.read_bytes(), dtype=np.uint8)
    except OSError as error:
        raise ImageReadError(
            f"{path_text(path)}: cannot read the image ({error.strerror}); check the path"
        ) from None
    bgr = cv2.imdecode(encoded, cv2.IMREAD_COLOR) if encoded.size else None
    if bgr is None:
        raise ImageReadError(
            f"{path_text(path)}: cannot decode the image (empty, truncated or not an image); "
            "run `lucid-yolo data check` or train with policy='skip' to leave it out"
        )
    return np.asarray(bgr, dtype=np.uint8)


def write_image(path: Path, bgr: UInt8Array, params: Sequence[int] = ()) -> None:
    """Encode ``bgr`` in the format of ``path``'s suffix and write it.

    Args:
        path: target file; its suffix (``.png``, ``.jpg``…) picks the encoder.
        bgr: (h, w, 3) uint8 BGR image (or (h, w) grayscale).
        params: OpenCV encoder flags and values, e.g. ``[cv2.IMWRITE_JPEG_QUALITY, 95]``.

    Raises:
        OSError: OpenCV has no encoder for the suffix, or the file cannot be written.
    """
    try:
        done, encoded = cv2.imencode(path.suffix, bgr, list(params))
    except cv2.error:
        done = False
    if not done:
        raise OSError(
            f"{path_text(path)}: OpenCV could not encode the image as {path.suffix!r}; "
            "use .png or .jpg"
        )
    path.write_bytes(encoded.tobytes())


__all__ = ["read_image", "write_image"]
