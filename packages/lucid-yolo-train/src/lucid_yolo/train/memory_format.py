"""One memory layout for a whole fit: the network, its EMA copy and every image it sees.

Why (issue 11, docs/engineering/whole-fit-speed.md, "Channels-last by default"): on an H200 a
captured bf16 forward and backward of YOLO26n at batch 16 takes 18.05 ms with weights and images
in ``torch.channels_last`` against 32.62 ms in NCHW (``tools/bench_memory_format.py``): cuDNN's
NHWC convolutions skip the layout transposes the NCHW ones pay. The layout changes which kernels
run, not what the network computes; a native and a replayed fit that share it stay bitwise
equal. What it costs: a fit in one layout is not bitwise equal to a fit in the other (other
kernels, other rounding). On the CPU only one small probe timed it (no slower there), so ``auto``
keeps NCHW on the CPU and CPU fits compute what they did before.

One layout for the whole fit matters to replay as much as to speed: a recorded region keys on its
inputs' strides (:class:`~lucid_yolo.replay.TensorSpec`), so images arriving in another layout
than the recording's would record again or run natively. The float images are therefore always
made here, in the chosen layout, whatever layout the data path hands over, and in the dtype
the first convolution computes in under mixed precision (:func:`network_input_dtype`).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from lucid_yolo.train.exceptions import TrainConfigError

MemoryFormat = Literal["auto", "channels_last", "contiguous"]
"""The module's ``memory_format`` option: ``auto`` is ``channels_last`` on CUDA, else
``contiguous`` (NCHW)."""

MEMORY_FORMATS: tuple[MemoryFormat, ...] = ("auto", "channels_last", "contiguous")

_LAYOUTS = {"channels_last": torch.channels_last, "contiguous": torch.contiguous_format}


def check_memory_format(choice: str) -> MemoryFormat:
    """``choice`` as a :data:`MemoryFormat`.

    Raises:
        TrainConfigError: ``choice`` is not one of :data:`MEMORY_FORMATS`.
    """
    for known in MEMORY_FORMATS:
        if choice == known:
            return known
    raise TrainConfigError(
        f"memory_format={choice!r} is not a layout; use one of {MEMORY_FORMATS!r} "
        "(auto: channels_last on CUDA, contiguous elsewhere)"
    )


def resolve_memory_format(choice: MemoryFormat, device: torch.device) -> torch.memory_format:
    """The torch layout ``choice`` means for a fit on ``device``."""
    if choice == "auto":
        return torch.channels_last if device.type == "cuda" else torch.contiguous_format
    return _LAYOUTS[choice]


def float_images(
    raw: Tensor, memory_format: torch.memory_format, dtype: torch.dtype = torch.float32
) -> Tensor:
    """Float images in [0, 1] in ``memory_format``: for a ``dtype`` of float32, bfloat16 or
    float16, ``raw.float().div_(255.0).to(dtype)`` bit for bit.

    One copy whatever layout ``raw`` has (the device HSV pass may hand over ``channels_last``
    uint8, the workers' collate NCHW); a uint8 to float copy is exact in any layout. In a half
    precision ``dtype`` the division runs in that dtype: each of the 256 values then rounds to
    the float32 quotient cast down (tested for all of them), with no float32 batch on the way.

    Args:
        raw: (B, 3, H, W) uint8 images.
        memory_format: the layout of the result.
        dtype: the result's floating dtype (:func:`network_input_dtype`).

    Returns:
        (B, 3, H, W) ``dtype``, laid out in ``memory_format``.
    """
    return raw.to(dtype, memory_format=memory_format).div_(255.0)


def network_input_dtype(device: torch.device) -> torch.dtype:
    """The dtype to make a network's images in on ``device`` at this point: autocast's while
    it is on there (Lightning's mixed precision turns it on around each step), else float32.

    Why: autocast casts a float32 input down before the first convolution, so images made in
    its dtype are the bits the convolution would have read, in half the memory: at batch 16,
    640 px, a float32 batch is 78.6 MB, and a replayed fit keeps one for good as the network's
    static input besides the down-cast copy its graph saves for the backward. Every network of
    ``lucid_yolo.models`` begins with a convolution (tested per task).
    """
    kind = device.type
    if torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return torch.float32


def layout_stride(shape: tuple[int, ...], memory_format: torch.memory_format) -> tuple[int, ...]:
    """The strides of a fresh dense tensor of ``shape`` in ``memory_format`` (no memory used)."""
    return torch.empty(shape, device="meta", memory_format=memory_format).stride()


__all__ = [
    "MEMORY_FORMATS",
    "MemoryFormat",
    "check_memory_format",
    "float_images",
    "layout_stride",
    "network_input_dtype",
    "resolve_memory_format",
]
