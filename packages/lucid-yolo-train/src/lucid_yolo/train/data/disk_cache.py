"""Decoded images in a memory-mapped file, reused by later runs while the sources are unchanged.

The RAM cache (:mod:`.cache`) decodes the split again in every run and needs the split to fit in
memory. This cache writes every image of a split once, decoded and resized to ``imgsz`` on its long
side (the same pixels :func:`.cache.load_image` returns), into one flat ``uint8`` file, and maps it
read-only: the operating system's page cache then serves the loader workers, and a split larger
than RAM still skips JPEG decoding.

A cache folder is named by a fingerprint of the cache version, ``imgsz`` and every source file's
path, size and modification time, so editing, adding or removing an image makes a new cache
instead of serving stale pixels. A folder is built under a temporary name and renamed into place
when complete, so an interrupted build is never reused (a leftover temporary folder is removed by
the next build of the same fingerprint).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from lucid_yolo.train.data.augment.sample import UInt8Array
from lucid_yolo.train.data.cache import load_image
from lucid_yolo.train.data.errors import DatasetConfigError
from lucid_yolo.train.data.progress import Progress

CACHE_VERSION = 2
"""Bumped whenever the decoded pixels or the file layout change, so old folders are not reused."""

PIXELS = "pixels.u8"
INDEX = "index.npy"
"""Per image: byte offset, height, width, source height, source width (int64)."""


def fingerprint(paths: Sequence[Path], imgsz: int) -> str:
    """Hex digest naming the cache of ``paths`` at ``imgsz`` (module docstring).

    Raises:
        DatasetConfigError: a source file is missing.
    """
    digest = hashlib.sha256(f"lucid-yolo-images v{CACHE_VERSION} imgsz={imgsz}\n".encode())
    for path in paths:
        try:
            stat = path.stat()
        except OSError as error:
            raise DatasetConfigError(
                f"{path}: cannot read the image to cache it ({error})"
            ) from error
        digest.update(f"{os.fsencode(path)!r} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


def has_disk_cache(root: Path, paths: Sequence[Path], imgsz: int) -> bool:
    """Whether ``root`` holds a complete cache of ``paths`` at ``imgsz``, written by an earlier
    run while the images were as they are now (a missing image or an unreadable ``root``: no
    cache to reuse)."""
    try:
        return (root / fingerprint(paths, imgsz)).is_dir()
    except (DatasetConfigError, OSError):
        return False


class DiskImageCache:
    """Every image of a split, decoded once into a memory-mapped file (module docstring).

    Args:
        root: folder holding one sub-folder per fingerprint.
        paths: image files, position = dataset index.
        imgsz: long side the images are resized to.
        threads: decoding threads for a build (OpenCV releases the GIL while decoding).
        label: what the progress lines of a long build say (:class:`.Progress`).

    Attributes:
        directory: this split's cache folder.
        reused: whether a complete cache was found instead of built.

    Raises:
        DatasetConfigError: a source image is missing, or the disk lacks the room for the cache.
        ImageReadError: an image cannot be decoded during a build.
    """

    def __init__(
        self,
        root: Path,
        paths: Sequence[Path],
        imgsz: int,
        threads: int = 4,
        label: str = "data: writing the disk cache",
    ) -> None:
        self.imgsz = imgsz
        self.directory = root / fingerprint(paths, imgsz)
        self.reused = self.directory.is_dir()
        if not self.reused:
            self._build(paths, threads, Progress(label, len(paths)))
        # a cache folder is data, never code: an index holding pickled objects is refused
        self._index: np.ndarray[Any, np.dtype[np.int64]] = np.load(
            self.directory / INDEX, allow_pickle=False
        )
        self._pixels: np.memmap[Any, np.dtype[np.uint8]] | None = None

    def __len__(self) -> int:
        return len(self._index)

    @property
    def nbytes(self) -> int:
        """Bytes of decoded pixels held in the file."""
        return int((self._index[:, 1] * self._index[:, 2] * 3).sum())

    def get(self, index: int) -> tuple[UInt8Array, tuple[int, int]] | None:
        """The read-only ``(image, source size)`` of dataset image ``index``."""
        if not 0 <= index < len(self._index):
            return None
        offset, h, w, source_h, source_w = (int(v) for v in self._index[index])
        image = self._map()[offset : offset + h * w * 3].reshape(h, w, 3)
        return image, (source_h, source_w)

    def put(self, index: int, image: UInt8Array, orig_size: tuple[int, int]) -> bool:
        """Every image is in the file already; returns whether ``index`` is one of them."""
        return 0 <= index < len(self._index)

    def __getstate__(self) -> dict[str, Any]:
        # A worker started by spawn or forkserver maps the file itself instead of receiving a
        # pickled copy of every pixel.
        return {**self.__dict__, "_pixels": None}

    def _map(self) -> np.memmap[Any, np.dtype[np.uint8]]:
        if self._pixels is None:
            self._pixels = np.memmap(self.directory / PIXELS, dtype=np.uint8, mode="r")
        return self._pixels

    def _build(self, paths: Sequence[Path], threads: int, progress: Progress) -> None:
        self.directory.parent.mkdir(parents=True, exist_ok=True)
        building = self.directory.with_name(f"{self.directory.name}.building-{os.getpid()}")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir()
        need = len(paths) * self.imgsz * self.imgsz * 3
        free = shutil.disk_usage(building).free
        if need > free:
            shutil.rmtree(building, ignore_errors=True)
            raise DatasetConfigError(
                f"{self.directory.parent}: the disk cache of {len(paths)} images needs up to "
                f"{need / 2**30:.2f} GiB and {free / 2**30:.2f} GiB are free; free some space, "
                "choose another cache_dir, or use cache=false"
            )
        rows = np.zeros((len(paths), 5), dtype=np.int64)
        offset = 0
        try:
            with (
                (building / PIXELS).open("wb") as pixels,
                ThreadPoolExecutor(max_workers=max(1, threads)) as pool,
            ):
                decoded = pool.map(lambda p: load_image(p, self.imgsz), paths)
                for i, (image, (source_h, source_w)) in enumerate(decoded):
                    h, w = image.shape[:2]
                    rows[i] = (offset, h, w, source_h, source_w)
                    pixels.write(np.ascontiguousarray(image).tobytes())
                    offset += h * w * 3
                    progress.advance()
            np.save(building / INDEX, rows)
            os.replace(building, self.directory)
        except OSError:
            shutil.rmtree(building, ignore_errors=True)
            if not self.directory.is_dir():
                raise
        finally:
            shutil.rmtree(building, ignore_errors=True)


__all__ = ["CACHE_VERSION", "DiskImageCache", "fingerprint", "has_disk_cache"]
