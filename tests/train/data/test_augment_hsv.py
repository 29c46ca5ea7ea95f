"""HSV jitter: the gain draw, the OpenCV path and the device path that must equal it."""

from __future__ import annotations

import sys

import cv2
import numpy as np
import pytest
import torch

from lucid_yolo.train.data.augment import (
    MAX_LOOKUP_IMAGES,
    HsvTables,
    draw_hsv_gains,
    hsv_cpu,
    hsv_lookup,
    hsv_luts,
    hsv_on_device,
    jitter_tables,
)
from lucid_yolo.train.data.augment.hsv import HUE_LEVELS
from lucid_yolo.train.exceptions import TrainConfigError

YOLO_AMPLITUDES = (0.015, 0.7, 0.4)


@pytest.fixture(scope="module")
def cpu_tables() -> HsvTables:
    return HsvTables.on(torch.device("cpu"))


def _image(size: int = 64, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)


def _channels_first(images: list[np.ndarray]) -> torch.Tensor:
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()


def test_draw_hsv_gains_zero_amplitudes_draw_nothing() -> None:
    rng = np.random.default_rng(0)
    assert draw_hsv_gains((0, 0, 0), rng) is None
    assert rng.random() == np.random.default_rng(0).random()


def test_draw_hsv_gains_stay_within_the_amplitudes() -> None:
    rng = np.random.default_rng(1)
    gains = np.stack([draw_hsv_gains(YOLO_AMPLITUDES, rng) for _ in range(200)])  # type: ignore[misc]
    assert np.all(np.abs(gains - 1) <= np.asarray(YOLO_AMPLITUDES))


def test_hsv_cpu_value_gain_changes_brightness_only() -> None:
    image = _image(16)
    out = hsv_cpu(image, np.array([1.0, 1.0, 1.5]))
    hsv_in = cv2.cvtColor(image, cv2.COLOR_RGB2HSV).astype(int)
    hsv_out = cv2.cvtColor(out, cv2.COLOR_RGB2HSV).astype(int)
    assert not np.array_equal(out, image)
    assert np.abs(hsv_out[..., 0] - hsv_in[..., 0]).mean() < 8


def _packed(triples: np.ndarray) -> torch.Tensor:
    """(N, 3) uint8 -> (N,) int64 ``t0 | t1 << 8 | t2 << 16``."""
    wide = triples.astype(np.int64)
    return torch.from_numpy(wide[:, 0] | wide[:, 1] << 8 | wide[:, 2] << 16)


def test_hsv_tables_hold_opencv_conversions_packed(cpu_tables: HsvTables) -> None:
    image = _image(32)
    hsv = cv2.cvtColor(image, cv2.COLOR_RGB2HSV).reshape(-1, 3)
    rgb = image.reshape(-1, 3)
    assert cpu_tables.to_hsv.dtype == torch.int32
    assert torch.equal(cpu_tables.to_hsv[_packed(rgb)].long(), _packed(hsv[:, ::-1]))
    back = cv2.cvtColor(hsv.reshape(32, 32, 3), cv2.COLOR_HSV2RGB).reshape(-1, 3)
    assert np.array_equal(cpu_tables.to_rgb[_packed(hsv[:, ::-1])].numpy(), back)


def test_jitter_tables_hold_each_images_channel_tables_packed() -> None:
    gains = torch.tensor([[1.01, 0.5, 1.3], [0.99, 1.6, 0.7]], dtype=torch.float64)
    luts = hsv_luts(gains).long()
    jitter = jitter_tables(gains)
    h, s, v = 179, 200, 37
    for image in range(2):
        assert jitter.hue[image, h] == luts[image, 0, h] << 16
        value = luts[image, 2, v] | luts[image, 1, s] << 8
        assert jitter.saturation_value[image, v | s << 8] == value


@pytest.mark.parametrize("size", [32, 64, 96])
def test_hsv_on_device_equals_hsv_cpu_bitwise(cpu_tables: HsvTables, size: int) -> None:
    rng = np.random.default_rng(size)
    images = [_image(size, seed) for seed in range(4)]
    gains = np.stack([draw_hsv_gains(YOLO_AMPLITUDES, rng) for _ in images])  # type: ignore[misc]
    out = hsv_on_device(_channels_first(images), torch.from_numpy(gains), cpu_tables)
    expected = _channels_first([hsv_cpu(im, g) for im, g in zip(images, gains, strict=True)])
    assert out.dtype == torch.uint8
    assert torch.equal(out, expected)


def test_hsv_on_device_hue_table_entry_of_180_equals_hsv_cpu(cpu_tables: HsvTables) -> None:
    # a hue gain just below zero: x * gain is just below zero, and modulo 180 rounds up to 180
    gains = np.array([[-1e-15, 1.0, 1.0]])
    assert hsv_luts(torch.from_numpy(gains))[0, 0].max() == HUE_LEVELS
    image = _image(32, seed=4)
    out = hsv_on_device(_channels_first([image]), torch.from_numpy(gains), cpu_tables)
    assert torch.equal(out, _channels_first([hsv_cpu(image, gains[0])]))


def test_hsv_on_device_extreme_gains_equal_hsv_cpu(cpu_tables: HsvTables) -> None:
    # hue wrapping past 180 and saturation/value clipped at 255 in both paths
    image = _image(32, seed=9)
    gains = np.array([[1.9, 2.0, 2.0], [0.1, 0.0, 0.5]])
    out = hsv_on_device(_channels_first([image, image]), torch.from_numpy(gains), cpu_tables)
    assert torch.equal(out, _channels_first([hsv_cpu(image, g) for g in gains]))


def test_jitter_tables_refuse_more_images_than_an_int32_offset_reaches() -> None:
    last_row = (MAX_LOOKUP_IMAGES << 16) - 1  # the last image's last saturation-value row
    assert last_row == torch.iinfo(torch.int32).max
    gains = torch.ones(MAX_LOOKUP_IMAGES + 1, 3, dtype=torch.float64)
    with pytest.raises(TrainConfigError, match="chunk_pixels"):
        jitter_tables(gains)


def test_hsv_lookup_refuses_jitter_tables_of_other_images(cpu_tables: HsvTables) -> None:
    images = _channels_first([_image(8, seed) for seed in range(3)])
    jitter = jitter_tables(torch.ones(2, 3, dtype=torch.float64))
    with pytest.raises(TrainConfigError, match="3 images and jitter tables for 2"):
        hsv_lookup(images, jitter, cpu_tables)


def test_hsv_tables_refuse_a_big_endian_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "byteorder", "big")
    with pytest.raises(TrainConfigError, match="pixels_on_device: false"):
        HsvTables.on(torch.device("cpu"))


def test_hsv_on_device_of_views_and_of_no_images(cpu_tables: HsvTables) -> None:
    rng = np.random.default_rng(3)
    images = [_image(40, seed) for seed in range(3)]
    gains = np.stack([draw_hsv_gains(YOLO_AMPLITUDES, rng) for _ in images])  # type: ignore[misc]
    view = _channels_first(images)[1:, :, 3:, 8:]  # a slice of the batch, cropped (OpenCV's
    # vector code converts every pixel of a row a multiple of 32 wide: the module docstring)
    out = hsv_on_device(view, torch.from_numpy(gains[1:]), cpu_tables)
    crops = [np.ascontiguousarray(im[3:, 8:]) for im in images[1:]]
    expected = _channels_first([hsv_cpu(im, g) for im, g in zip(crops, gains[1:], strict=True)])
    assert torch.equal(out, expected)
    none = hsv_on_device(view[:0], torch.from_numpy(gains[:0]), cpu_tables)
    assert none.shape == (0, 3, 37, 32)


@pytest.mark.gpu
def test_hsv_on_device_on_cuda_equals_hsv_cpu_bitwise() -> None:
    rng = np.random.default_rng(0)
    drawn = np.stack([draw_hsv_gains(YOLO_AMPLITUDES, rng) for _ in range(4)])  # type: ignore[misc]
    # with the CPU tests' edge gains: the hue table entry of 180, hue wrapping, clipping at 255
    edges = np.array([[-1e-15, 1.0, 1.0], [1.9, 2.0, 2.0], [0.1, 0.0, 0.5]])
    gains = np.concatenate([drawn, edges])
    images = [_image(640, seed) for seed in range(len(gains))]
    device = torch.device("cuda")
    out = hsv_on_device(
        _channels_first(images).to(device), torch.from_numpy(gains).to(device), HsvTables.on(device)
    )
    expected = _channels_first([hsv_cpu(im, g) for im, g in zip(images, gains, strict=True)])
    assert torch.equal(out.cpu(), expected)
