"""The ground-truth mask cache: built once per image, rebuilt when what defines them changes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lucid_yolo.train import source_mask_cache
from lucid_yolo.train.geometry import RunLengthMask, source_masks
from lucid_yolo.train.source_mask_cache import SourceMaskCache

TRIANGLE = np.array([[2.0, 2.0], [20.0, 4.0], [8.0, 18.0]])
SQUARE = np.array([[10.0, 10.0], [30.0, 10.0], [30.0, 30.0], [10.0, 30.0]])


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the cache rasterised (one entry per call)."""
    calls: list[int] = []

    def counted(*args: object) -> torch.Tensor:
        calls.append(1)
        return source_masks(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(source_mask_cache, "source_masks", counted)
    return calls


def test_source_mask_cache_builds_an_image_once(builds: list[int]) -> None:
    cache = SourceMaskCache()
    first = cache.masks([TRIANGLE, SQUARE], 32, 40, pinned=False)
    again = cache.masks([TRIANGLE.copy(), SQUARE.copy()], 32, 40, pinned=False)
    assert again is first
    assert len(builds) == 1
    assert torch.equal(first, source_masks([TRIANGLE, SQUARE], 32, 40))


@pytest.mark.parametrize(
    ("shapes", "height", "width"),
    [
        ([TRIANGLE, SQUARE + 1.0], 32, 40),  # a moved polygon
        ([TRIANGLE], 32, 40),  # an instance fewer
        ([SQUARE, TRIANGLE], 32, 40),  # another order
        ([TRIANGLE, SQUARE], 40, 32),  # another size
    ],
)
def test_source_mask_cache_rebuilds_when_the_image_changes(
    builds: list[int], shapes: list[np.ndarray], height: int, width: int
) -> None:
    cache = SourceMaskCache()
    cache.masks([TRIANGLE, SQUARE], 32, 40, pinned=False)
    changed = cache.masks(shapes, height, width, pinned=False)
    assert len(builds) == 2
    assert torch.equal(changed, source_masks(shapes, height, width))


def test_source_mask_cache_tells_an_rle_from_its_runs_polygon(builds: list[int]) -> None:
    runs = np.array([5, 10, 1265], dtype=np.int64)
    rle = RunLengthMask.from_counts(runs.tolist(), 32, 40)
    cache = SourceMaskCache()
    cache.masks([rle], 32, 40, pinned=False)
    other = RunLengthMask.from_counts([6, 10, 1264], 32, 40)
    assert torch.equal(cache.masks([other], 32, 40, pinned=False), source_masks([other], 32, 40))
    assert len(builds) == 2


def test_source_mask_cache_keeps_nothing_past_its_budget(builds: list[int]) -> None:
    cache = SourceMaskCache(max_bytes=2 * 32 * 40)  # room for one image of two instances
    for _ in range(2):
        cache.masks([TRIANGLE, SQUARE], 32, 40, pinned=False)
        cache.masks([TRIANGLE, SQUARE, SQUARE], 32, 40, pinned=False)
    assert len(builds) == 3  # the second image is built every time


@pytest.mark.gpu
def test_source_mask_cache_pins_masks_for_a_gpu_once(builds: list[int]) -> None:
    cache = SourceMaskCache()
    pinned = cache.masks([TRIANGLE], 32, 40, pinned=True)
    assert pinned.is_pinned()
    assert cache.masks([TRIANGLE], 32, 40, pinned=True) is pinned
    assert not cache.masks([TRIANGLE], 32, 40, pinned=False).is_pinned()
    assert len(builds) == 2
