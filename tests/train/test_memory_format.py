"""The fit's one layout: the option checked, resolved per device, the float images made in it."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.train import TrainConfigError
from lucid_yolo.train.memory_format import (
    check_memory_format,
    float_images,
    layout_stride,
    resolve_memory_format,
)

CHANNELS_LAST = torch.channels_last
CONTIGUOUS = torch.contiguous_format


def test_check_memory_format_takes_every_choice() -> None:
    for choice in ("auto", "channels_last", "contiguous"):
        assert check_memory_format(choice) == choice


def test_check_memory_format_rejects_an_unknown_layout_listing_the_choices() -> None:
    with pytest.raises(
        TrainConfigError,
        match=r"memory_format='nhwc' is not a layout; use one of "
        r"\('auto', 'channels_last', 'contiguous'\)",
    ):
        check_memory_format("nhwc")


@pytest.mark.parametrize(
    ("choice", "device", "expected"),
    [
        ("auto", "cuda", CHANNELS_LAST),
        ("auto", "cpu", CONTIGUOUS),
        ("auto", "mps", CONTIGUOUS),
        ("channels_last", "cpu", CHANNELS_LAST),
        ("contiguous", "cuda", CONTIGUOUS),
    ],
)
def test_resolve_memory_format_per_device(
    choice: str, device: str, expected: torch.memory_format
) -> None:
    assert resolve_memory_format(check_memory_format(choice), torch.device(device)) == expected


@pytest.mark.parametrize("layout", [CHANNELS_LAST, CONTIGUOUS])
@pytest.mark.parametrize("raw_layout", [CHANNELS_LAST, CONTIGUOUS])
def test_float_images_are_the_plain_division_in_the_asked_layout(
    layout: torch.memory_format, raw_layout: torch.memory_format
) -> None:
    gen = torch.Generator().manual_seed(0)
    raw = torch.randint(0, 256, (2, 3, 8, 6), dtype=torch.uint8, generator=gen)
    images = float_images(raw.contiguous(memory_format=raw_layout), layout)
    assert images.is_contiguous(memory_format=layout)
    assert images.dtype == torch.float32
    assert torch.equal(images.view(torch.int32), raw.float().div_(255.0).view(torch.int32))


@pytest.mark.parametrize("layout", [CHANNELS_LAST, CONTIGUOUS])
def test_layout_stride_is_a_dense_tensor_stride(layout: torch.memory_format) -> None:
    shape = (2, 3, 8, 6)
    assert layout_stride(shape, layout) == torch.empty(shape, memory_format=layout).stride()
