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
made here, in the chosen layout, whatever layout the data path hands over.

``auto`` also decides where the depthwise convolutions compute (session 9, the same page,
"Depthwise convolutions and the first step"). In channels-last PyTorch sends them to cuDNN,
whose plans for them compile at their first call: 4.6-9.8 s of the first step on an H200 for
yolo26n. In NCHW they need no compilation but cost about 0.17 ms more per training image
(2.97 ms per graphed forward+backward at batch 16, 0.69 ms at batch 4; yolo26n-seg 2.66 and
0.61 ms). Below :data:`NCHW_DEPTHWISE_BELOW_IMAGES` planned training images per process,
about 6 s / 0.17 ms, NCHW is the faster whole run; above it channels-last is.
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


NCHW_DEPTHWISE_BELOW_IMAGES = 30_000
"""Training images per process below which ``auto`` computes depthwise convolutions in NCHW:
the first call's compilation (about 5-6 s on an H200, measured) over the per-image cost of NCHW
(about 0.17 ms), rounded down. Validation, test and prediction train none, so they use NCHW."""


def depthwise_in_nchw(
    choice: MemoryFormat, device: torch.device, planned_images: int | None
) -> bool:
    """Whether ``choice`` computes the depthwise convolutions in NCHW inside channels-last.

    Only ``auto`` on CUDA does, for a run that trains fewer than
    :data:`NCHW_DEPTHWISE_BELOW_IMAGES` images per process. ``planned_images`` is ``None`` when
    the run's length is not known (a loader without a batch size): channels-last throughout.
    """
    if choice != "auto" or device.type != "cuda" or planned_images is None:
        return False
    return planned_images < NCHW_DEPTHWISE_BELOW_IMAGES


def float_images(raw: Tensor, memory_format: torch.memory_format) -> Tensor:
    """Float images in [0, 1] in ``memory_format``: ``raw.float().div_(255.0)``, bit for bit.

    One copy whatever layout ``raw`` has (the device HSV pass may hand over ``channels_last``
    uint8, the workers' collate NCHW); a uint8 to float32 copy is exact in any layout.

    Args:
        raw: (B, 3, H, W) uint8 images.
        memory_format: the layout of the result.

    Returns:
        (B, 3, H, W) float32, laid out in ``memory_format``.
    """
    return raw.to(torch.float32, memory_format=memory_format).div_(255.0)


def layout_stride(shape: tuple[int, ...], memory_format: torch.memory_format) -> tuple[int, ...]:
    """The strides of a fresh dense tensor of ``shape`` in ``memory_format`` (no memory used)."""
    return torch.empty(shape, device="meta", memory_format=memory_format).stride()


__all__ = [
    "MEMORY_FORMATS",
    "NCHW_DEPTHWISE_BELOW_IMAGES",
    "MemoryFormat",
    "check_memory_format",
    "depthwise_in_nchw",
    "float_images",
    "layout_stride",
    "resolve_memory_format",
]
