"""The device-pixels memory tool: what it counts, and the bound that chunking keeps."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from tool_modules import load_tool

from lucid_yolo.train.data.augment import DevicePixels
from lucid_yolo.train.data.augment.device_pixels import TABLE_PIXELS
from lucid_yolo.train.data.augment.hsv import JITTER_TABLE_BYTES

IMGSZ = 160  # an image's lookup temporaries (307 KB) outweigh its channel tables (257 KiB)


@pytest.fixture
def memory_tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("device_pixels_memory", monkeypatch)


def test_live_bytes_peak_counts_tensors_alive_together(memory_tool: ModuleType) -> None:
    source = torch.zeros(1000, dtype=torch.uint8)
    with memory_tool.LiveBytes(source) as held:
        wide = source.int()  # 4000 bytes
        doubled = wide * 2  # 4000 more: the peak, 8000
        del wide
        doubled.add_(1)  # in place: nothing new
        narrow = doubled[:10].to(torch.uint8)  # 10 bytes
        del doubled
    assert held.peak == 8000
    assert held.live == narrow.nbytes
    assert held.operators == 4


def test_live_bytes_never_counts_its_inputs_or_their_views(memory_tool: ModuleType) -> None:
    source = torch.zeros(1000, dtype=torch.uint8)
    with memory_tool.LiveBytes(source) as held:
        source.view(10, 100).t().add_(1)
    assert held.peak == 0


def test_device_pixels_in_chunks_hold_what_one_image_holds_plus_its_tables(
    memory_tool: ModuleType,
) -> None:
    def peak(pixels: DevicePixels, images: int) -> int:
        batch = memory_tool.synthetic_batch(images, IMGSZ, 0, torch.device("cpu"))
        measured = memory_tool.measure(pixels, batch)
        assert measured["cuda_peak_allocated_bytes"] is None
        return int(measured["live_peak_bytes"])

    pixels = DevicePixels(chunk_pixels=IMGSZ * IMGSZ)
    peak(pixels, 1)  # builds the tables
    one = peak(pixels, 1)
    assert peak(pixels, 8) <= one + 8 * 3 * 256  # a chunk's tables go with it: small slack
    pixels.chunk_pixels = 8 * (IMGSZ * IMGSZ + TABLE_PIXELS)
    assert peak(pixels, 8) > 4 * one


def test_device_pixels_count_small_images_channel_tables_towards_a_chunk(
    memory_tool: ModuleType,
) -> None:
    size = 8  # 64 pixels an image against 257 KiB of channel tables
    pixels = DevicePixels(chunk_pixels=4 * (size * size + TABLE_PIXELS))
    batch = memory_tool.synthetic_batch(16, size, 0, torch.device("cpu"))
    memory_tool.measure(pixels, batch)  # builds the tables
    batch = memory_tool.synthetic_batch(16, size, 0, torch.device("cpu"))
    held = int(memory_tool.measure(pixels, batch)["live_peak_bytes"])
    assert 4 * JITTER_TABLE_BYTES <= held < 5 * JITTER_TABLE_BYTES


def test_device_pixels_hold_one_unpacked_mask_tensor(memory_tool: ModuleType) -> None:
    batch = memory_tool.synthetic_batch(2, IMGSZ, 5, torch.device("cpu"))
    del batch["deferred_hsv"], batch["deferred_flip"]
    masks_bytes = 2 * 5 * (IMGSZ // 4) ** 2
    measured = memory_tool.measure(DevicePixels(), batch)
    assert masks_bytes <= measured["live_peak_bytes"] < 2 * masks_bytes
