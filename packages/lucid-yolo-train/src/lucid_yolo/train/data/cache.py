"""Decoding images and the bounded RAM cache of decoded, resized images.

Decoding a JPEG and resizing it is most of a worker's time on small models, and every epoch repeats
it. :class:`ImageCache` keeps each image decoded and already resized to ``imgsz`` on its long side
(the size every pipeline starts from), as RGB uint8, up to ``max_bytes``; images past the budget
are simply decoded each time (first come, first cached, never evicted, so a run is reproducible).

The data module fills the cache in the main process before the DataLoader starts its workers:
with the default ``fork`` start method the workers then share those pages copy-on-write instead of
each building its own copy (with ``spawn`` every worker receives a pickled copy).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np

from lucid_yolo.train.data.augment.letterbox import resize_long_side
from lucid_yolo.train.data.augment.sample import UInt8Array
from lucid_yolo.train.data.image_file import read_image
from lucid_yolo.train.data.progress import Progress
from lucid_yolo.train.exceptions import TrainConfigError


def load_image(path: Path, imgsz: int) -> tuple[UInt8Array, tuple[int, int]]:
    """Decode an image as RGB and resize it to ``imgsz`` on its long side.

    Args:
        path: image file (read by :func:`.image_file.read_image`, so any file name works).
        imgsz: target long side, pixels.

    Returns:
        ``(image, (height, width))``: (h, w, 3) uint8 RGB with ``max(h, w) == imgsz``, and the
        source size.

    Raises:
        ImageReadError: the file is missing or OpenCV cannot decode it.
    """
    bgr = read_image(path)
    rgb = np.asarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), dtype=np.uint8)
    return resize_long_side(rgb, imgsz), (int(bgr.shape[0]), int(bgr.shape[1]))


class ImageCache:
    """Decoded, resized images kept in RAM up to a byte budget (module docstring).

    Args:
        imgsz: long side the cached images are resized to.
        max_bytes: budget for the pixel data; images past it are not cached.

    Raises:
        TrainConfigError: a negative budget.
    """

    def __init__(self, imgsz: int, max_bytes: int) -> None:
        if max_bytes < 0:
            raise TrainConfigError(
                f"cache max_bytes={max_bytes!r} must be >= 0; use 0 to cache nothing"
            )
        self.imgsz = imgsz
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._images: dict[int, tuple[UInt8Array, tuple[int, int]]] = {}

    def __len__(self) -> int:
        return len(self._images)

    def get(self, index: int) -> tuple[UInt8Array, tuple[int, int]] | None:
        """The cached ``(image, source size)`` of dataset image ``index``, if cached."""
        return self._images.get(index)

    def put(self, index: int, image: UInt8Array, orig_size: tuple[int, int]) -> bool:
        """Cache an image if the budget allows; returns whether it was cached."""
        if index in self._images:
            return True
        if self.nbytes + image.nbytes > self.max_bytes:
            return False
        image.setflags(write=False)
        self._images[index] = (image, orig_size)
        self.nbytes += image.nbytes
        return True

    def fill(
        self, paths: Sequence[Path], threads: int = 4, label: str = "data: caching images"
    ) -> int:
        """Decode and cache images in order until the budget is spent.

        Args:
            paths: image files, position = dataset index.
            threads: decoding threads (OpenCV releases the GIL while decoding).
            label: what the progress lines of a long fill say (:class:`.Progress`).

        Returns:
            The number of images cached.
        """
        progress = Progress(label, len(paths))
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            for index, (image, size) in enumerate(
                pool.map(lambda p: load_image(p, self.imgsz), paths)
            ):
                if not self.put(index, image, size):
                    break
                progress.advance()
        return len(self._images)


__all__ = ["ImageCache", "load_image"]
