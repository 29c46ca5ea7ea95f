"""The memory-mapped disk cache: same pixels as decoding, reused while the images are unchanged."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import cv2
import numpy as np
import pytest

from lucid_yolo.train.data.cache import load_image
from lucid_yolo.train.data.disk_cache import DiskImageCache, fingerprint, has_disk_cache
from lucid_yolo.train.data.errors import DatasetConfigError, ImageReadError

IMGSZ = 48


@pytest.fixture
def images(tmp_path: Path) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for i, (h, w) in enumerate([(40, 60), (64, 32), (50, 50)]):
        path = tmp_path / "src" / f"{i}.png"
        path.parent.mkdir(exist_ok=True)
        cv2.imwrite(str(path), rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        paths.append(path)
    return paths


def test_disk_cache_holds_the_decoded_pixels(tmp_path: Path, images: list[Path]) -> None:
    cache = DiskImageCache(tmp_path / "cache", images, IMGSZ)
    assert not cache.reused
    assert len(cache) == 3
    for i, path in enumerate(images):
        cached = cache.get(i)
        assert cached is not None
        image, size = cached
        expected, expected_size = load_image(path, IMGSZ)
        assert size == expected_size
        np.testing.assert_array_equal(image, expected)
        assert not image.flags.writeable
    assert cache.get(3) is None
    assert cache.nbytes == sum(load_image(p, IMGSZ)[0].nbytes for p in images)


def test_disk_cache_is_reused_while_the_images_are_unchanged(
    tmp_path: Path, images: list[Path]
) -> None:
    first = DiskImageCache(tmp_path / "cache", images, IMGSZ)
    again = DiskImageCache(tmp_path / "cache", images, IMGSZ)
    assert again.reused
    assert again.directory == first.directory
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.directory.name]


def test_disk_cache_rebuilds_after_an_image_changes(tmp_path: Path, images: list[Path]) -> None:
    first = DiskImageCache(tmp_path / "cache", images, IMGSZ)
    cv2.imwrite(str(images[1]), np.full((64, 32, 3), 7, dtype=np.uint8))
    stat = images[1].stat()
    os.utime(images[1], ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    second = DiskImageCache(tmp_path / "cache", images, IMGSZ)
    assert not second.reused
    assert second.directory != first.directory
    cached = second.get(1)
    assert cached is not None
    assert int(cached[0].max()) == 7


def test_disk_cache_key_covers_size_and_order(images: list[Path]) -> None:
    assert fingerprint(images, IMGSZ) != fingerprint(images, IMGSZ * 2)
    assert fingerprint(images, IMGSZ) != fingerprint(images[::-1], IMGSZ)


def test_disk_cache_failed_build_leaves_nothing(tmp_path: Path, images: list[Path]) -> None:
    images[2].write_bytes(b"not an image")
    with pytest.raises(ImageReadError, match="cannot decode"):
        DiskImageCache(tmp_path / "cache", images, IMGSZ)
    assert list((tmp_path / "cache").iterdir()) == []


class _MakesMarker:
    """Unpickling it creates ``marker``: proof that a load ran code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (os.mkdir, (str(self.marker),))


def test_disk_cache_index_with_pickled_objects_is_refused_unrun(
    tmp_path: Path, images: list[Path]
) -> None:
    cache = DiskImageCache(tmp_path / "cache", images, IMGSZ)
    marker = tmp_path / "marker"
    index = np.array([_MakesMarker(marker)], dtype=object)
    np.save(cache.directory / "index.npy", index, allow_pickle=True)
    with pytest.raises(ValueError, match="allow_pickle=False"):
        DiskImageCache(tmp_path / "cache", images, IMGSZ)
    assert not marker.exists()


def test_disk_cache_refuses_a_missing_image(tmp_path: Path, images: list[Path]) -> None:
    with pytest.raises(DatasetConfigError, match="cannot read the image to cache it"):
        DiskImageCache(tmp_path / "cache", [*images, tmp_path / "gone.png"], IMGSZ)


def test_disk_cache_pickles_without_its_pixels(tmp_path: Path, images: list[Path]) -> None:
    cache = DiskImageCache(tmp_path / "cache", images, IMGSZ)
    assert cache.get(0) is not None
    restored = pickle.loads(pickle.dumps(cache))
    assert len(pickle.dumps(cache)) < cache.nbytes
    a, b = cache.get(2), restored.get(2)
    assert a is not None
    assert b is not None
    np.testing.assert_array_equal(a[0], b[0])


def test_has_disk_cache_only_once_a_build_completed(tmp_path: Path, images: list[Path]) -> None:
    assert not has_disk_cache(tmp_path / "cache", images, IMGSZ)
    DiskImageCache(tmp_path / "cache", images, IMGSZ)
    assert has_disk_cache(tmp_path / "cache", images, IMGSZ)
    assert not has_disk_cache(tmp_path / "cache", images, IMGSZ * 2)


def test_has_disk_cache_not_after_an_image_changes(tmp_path: Path, images: list[Path]) -> None:
    DiskImageCache(tmp_path / "cache", images, IMGSZ)
    stat = images[0].stat()
    os.utime(images[0], ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert not has_disk_cache(tmp_path / "cache", images, IMGSZ)


def test_has_disk_cache_not_for_a_missing_image(tmp_path: Path, images: list[Path]) -> None:
    DiskImageCache(tmp_path / "cache", images, IMGSZ)
    images[2].unlink()
    assert not has_disk_cache(tmp_path / "cache", images, IMGSZ)


def test_has_disk_cache_not_in_an_unreadable_root(
    tmp_path: Path, images: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    DiskImageCache(tmp_path / "cache", images, IMGSZ)

    def denied(self: Path) -> bool:
        raise PermissionError(13, "Permission denied", str(self))

    # chmod cannot deny root, who runs the tests on some machines
    monkeypatch.setattr(Path, "is_dir", denied)
    assert not has_disk_cache(tmp_path / "cache", images, IMGSZ)
