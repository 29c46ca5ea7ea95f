"""HSV jitter on CPU and on the device."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from lucid_yolo.train.data.augment import hsv_cpu, hsv_on_device


def _image() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)


def test_hsv_cpu_zero_gains_is_identity() -> None:
    image = _image()
    assert hsv_cpu(image, (0, 0, 0), np.random.default_rng(0)) is image


def test_hsv_cpu_value_gain_changes_brightness_only() -> None:
    image = _image()
    out = hsv_cpu(image, (0, 0, 0.5), np.random.default_rng(1))
    hsv_in = cv2.cvtColor(image, cv2.COLOR_RGB2HSV).astype(int)
    hsv_out = cv2.cvtColor(out, cv2.COLOR_RGB2HSV).astype(int)
    assert not np.array_equal(out, image)
    assert np.abs(hsv_out[..., 0] - hsv_in[..., 0]).mean() < 8


def test_hsv_on_device_zero_gains_is_identity() -> None:
    images = torch.from_numpy(_image()).permute(2, 0, 1)[None]
    assert hsv_on_device(images, (0, 0, 0)) is images


def test_hsv_on_device_round_trip_at_unit_gain() -> None:
    images = torch.from_numpy(_image()).permute(2, 0, 1)[None].contiguous()
    out = hsv_on_device(images, (1e-12, 1e-12, 1e-12), torch.Generator().manual_seed(0))
    assert out.dtype == torch.uint8
    assert (out.int() - images.int()).abs().max() <= 1


def test_hsv_on_device_matches_cpu_conversion_for_value_gain() -> None:
    image = _image()
    gen = torch.Generator().manual_seed(3)
    out = hsv_on_device(torch.from_numpy(image).permute(2, 0, 1)[None], (0, 0, 0.4), gen)
    gain = float(torch.rand((1, 3, 1, 1), generator=torch.Generator().manual_seed(3))[0, 2]) * 2 - 1
    hsv = cv2.cvtColor(image, cv2.COLOR_RGB2HSV)
    hsv[..., 2] = np.clip(hsv[..., 2].astype(np.float64) * (1 + 0.4 * gain), 0, 255).astype(
        np.uint8
    )
    reference = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB).astype(int)
    diff = np.abs(out[0].permute(1, 2, 0).numpy().astype(int) - reference)
    assert diff.mean() < 2.0


def test_hsv_on_device_reproducible_with_generator() -> None:
    images = torch.from_numpy(_image()).permute(2, 0, 1)[None].repeat(2, 1, 1, 1)
    a = hsv_on_device(images, (0.015, 0.7, 0.4), torch.Generator().manual_seed(5))
    b = hsv_on_device(images, (0.015, 0.7, 0.4), torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    assert not torch.equal(a[0], a[1])


@pytest.mark.gpu
def test_hsv_on_device_replays_in_cuda_graph_like_eager() -> None:
    images = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8, device="cuda")
    gains = (0.015, 0.7, 0.4)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        hsv_on_device(images, gains)  # warm-up on a side stream before capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = hsv_on_device(images, gains)
    torch.cuda.manual_seed(7)
    graph.replay()
    replayed = static_out.clone()
    torch.cuda.manual_seed(7)
    assert torch.equal(replayed, hsv_on_device(images, gains))
