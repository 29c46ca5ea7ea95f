"""The fit's one layout: the option checked, resolved per device, the float images made in it,
and in the dtype the network's first convolution computes in."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.models import create_model
from lucid_yolo.train import TrainConfigError
from lucid_yolo.train.memory_format import (
    check_memory_format,
    float_images,
    layout_stride,
    network_input_dtype,
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


def _every_value_in_half(device: str, dtype: torch.dtype) -> None:
    raw = (
        torch.arange(256, dtype=torch.uint8, device=device)
        .reshape(1, 1, 16, 16)
        .expand(2, 3, 16, 16)
    )
    for layout in (CHANNELS_LAST, CONTIGUOUS):
        made = float_images(raw, layout, dtype)
        cast_down = float_images(raw, layout).to(dtype)
        assert made.dtype == dtype
        assert made.is_contiguous(memory_format=layout)
        assert torch.equal(made.view(torch.int16), cast_down.view(torch.int16))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_float_images_in_half_precision_are_the_float32_quotients_cast_down(
    dtype: torch.dtype,
) -> None:
    """All 256 pixel values: the division in half precision rounds each to the float32
    quotient cast down, as autocast casts a float32 input before the first convolution."""
    _every_value_in_half("cpu", dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_float_images_in_half_precision_are_the_float32_quotients_cast_down(
    dtype: torch.dtype,
) -> None:
    _every_value_in_half("cuda", dtype)


def test_network_input_dtype_is_autocasts_while_it_is_on() -> None:
    cpu = torch.device("cpu")
    assert network_input_dtype(cpu) == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert network_input_dtype(cpu) == torch.bfloat16
        with torch.autocast("cpu", enabled=False):
            assert network_input_dtype(cpu) == torch.float32
    assert network_input_dtype(torch.device("meta")) == torch.float32


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("layout", [CHANNELS_LAST, CONTIGUOUS])
@pytest.mark.parametrize("name", ["yolo26n", "yolo26n-seg", "yolo26n-pose", "yolo26n-obb"])
def test_networks_train_to_the_same_bits_from_images_in_autocasts_dtype(
    name: str, layout: torch.memory_format, device: str, deterministic: None
) -> None:
    """The first operation of every packaged network is autocast's cast down, so images made
    in its dtype give the float32 images' outputs, gradients and BatchNorm statistics to the
    bit, in a training-mode forward and backward."""
    gen = torch.Generator().manual_seed(0)
    raw = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8, generator=gen).to(device)
    results = []
    for half in (False, True):
        net = create_model(name, num_classes=3, seed=0).to(device, memory_format=layout)
        with torch.autocast(device, dtype=torch.bfloat16):
            dtype = network_input_dtype(raw.device) if half else torch.float32
            outputs = net(float_images(raw, layout, dtype))
        sum(value.float().sum() for value in outputs.values()).backward()
        results.append(
            (dtype, outputs, net.state_dict(), {n: p.grad for n, p in net.named_parameters()})
        )
    (_, float32_outputs, float32_state, float32_grads), (dtype, outputs, state, grads) = results
    assert dtype == torch.bfloat16
    for key, value in float32_outputs.items():
        assert torch.equal(outputs[key], value), key
    for key, value in float32_state.items():
        assert torch.equal(state[key], value), key
    for key, value in float32_grads.items():
        assert value is not None
        assert torch.equal(grads[key], value), key
