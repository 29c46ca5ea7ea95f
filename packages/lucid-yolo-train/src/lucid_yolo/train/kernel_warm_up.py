"""The network's first forward and backward, run on another thread while a fit starts.

Why: cuDNN 9 compiles some convolution kernels at run time, the first time a process needs them.
On the H200 the channels-last depthwise convolutions' backward kernels take 0.6-1.5 s each, 4.7 s
for yolo26n at batch 16, and without this they land on the first training step, after Lightning's
set-up and sanity check have kept the GPU mostly idle. PyTorch keeps cuDNN's execution plans per
thread, but cuDNN keeps the compiled kernels per process: after a copy of the network ran forward
and backward on another thread, the main thread's first backward took 0.02 s instead of 4.90 s
(``tools/probe_first_conv.py --network --warm-in-thread``; docs/engineering/whole-fit-speed.md).
So the module starts that copy when the trainer sets it up, and the compilation overlaps the
model summary, the sanity check and the first batch's loading.

Why the fit's bits do not change: the copy is the network as laid out for the fit, fed zeros, in
the fit's autocast; nothing it computes is read, it draws no random number and the trained
network, its optimizer and its EMA are not touched. cuDNN picks the same plans with or without
compiled kernels at hand (the heuristics' order does not depend on them). The copy runs on the
device's default stream, the one the fit's own steps use, so the blocks it leaves in the caching
allocator are ones the first native step reuses.

Why the fit waits for it when training starts: a CUDA graph capture forbids other threads'
unsafe CUDA calls while it records, so the copy must be done before replay records its first
region.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

import torch
from torch import Tensor, nn

DEVICE_TYPES = ("cuda",)
"""Where a warm-up runs: cuDNN's run-time compilation is what it hides."""

AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {
    "32-true": None,
    "32": None,
    "bf16-mixed": torch.bfloat16,
    "16-mixed": torch.float16,
}
"""Lightning precisions a warm-up can reproduce: their autocast dtype (``None``: no autocast).
A ``*-true`` precision below 32 bits converts the module's weights after set-up and sets the
default dtype for the whole process, which another thread must not do; those fits start cold."""


class KernelWarmUp:
    """One forward and backward of a copy of ``net`` on a thread of its own.

    Args:
        net: the network as the fit will run it (layout applied); copied on the caller's thread,
            so later changes to it (a checkpoint's weights, the move to the device) do not race
            with the copy.
        images: shape of a training batch of images, ``(B, 3, H, W)``.
        device: the CUDA device the fit trains on.
        memory_format: the layout of the fit's images.
        autocast_dtype: the fit's autocast dtype (``None`` for none).
    """

    def __init__(
        self,
        net: nn.Module,
        images: tuple[int, int, int, int],
        device: torch.device,
        memory_format: torch.memory_format,
        autocast_dtype: torch.dtype | None,
    ) -> None:
        self._twin = copy.deepcopy(net)
        self._images = images
        self._device = device
        self._memory_format = memory_format
        self._autocast_dtype = autocast_dtype
        self._failure: BaseException | None = None
        self.seconds: float | None = None
        """How long the warm-up ran, once it has."""
        self._thread = threading.Thread(target=self._run, name="lucid-yolo kernel warm-up")
        self._thread.daemon = True
        self._thread.start()

    def _run(self) -> None:
        began = time.perf_counter()
        try:
            twin = self._twin.to(self._device).train()
            images = torch.zeros(self._images, device=self._device)
            images = images.contiguous(memory_format=self._memory_format)
            enabled = self._autocast_dtype is not None
            with torch.autocast(self._device.type, dtype=self._autocast_dtype, enabled=enabled):
                outputs = twin(images)
            torch.autograd.backward(_sum_of(outputs))
            if self._device.type == "cuda":
                torch.cuda.synchronize(self._device)
        except BaseException as error:
            self._failure = error
        finally:
            self._twin = nn.Module()
            self.seconds = time.perf_counter() - began

    def wait(self) -> None:
        """Block until the warm-up is done.

        Raises:
            BaseException: what the warm-up raised (an out-of-memory error, say): the first
                training step would meet it too.
        """
        self._thread.join()
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure

    def abandon(self) -> None:
        """Block until the warm-up is done and drop what it raised: for a fit that ends before
        training starts (its own error, if any, is the one to report)."""
        self._thread.join()
        self._failure = None


def _sum_of(outputs: object) -> Tensor:
    """One scalar that every floating output of the network reaches (a tensor, or a dict, list
    or tuple of them), so the backward runs through every convolution that gets a gradient."""
    if isinstance(outputs, Tensor):
        floating = outputs.is_floating_point()
        return outputs.float().sum() if floating else torch.zeros((), device=outputs.device)
    if isinstance(outputs, dict):
        outputs = list(outputs.values())
    if not isinstance(outputs, list | tuple):
        raise TypeError(f"network outputs of type {type(outputs).__name__!r} hold no tensors")
    return torch.stack([_sum_of(part) for part in outputs]).sum()


def start_kernel_warm_up(
    trainer: Any, net: nn.Module, memory_format: torch.memory_format
) -> KernelWarmUp | None:
    """A :class:`KernelWarmUp` of ``net`` for ``trainer``'s fit, or ``None`` where it cannot
    reproduce the fit's first step: a device other than :data:`DEVICE_TYPES`, a precision other
    than :data:`AUTOCAST_DTYPES`, or a data module that does not say the batch's shape
    (``batch_size`` and ``imgsz``, as :class:`~lucid_yolo.train.YoloDataModule` does)."""
    device: torch.device = trainer.strategy.root_device
    precision = str(trainer.precision)
    data = getattr(trainer, "datamodule", None)
    batch, imgsz = getattr(data, "batch_size", None), getattr(data, "imgsz", None)
    if not (
        device.type in DEVICE_TYPES
        and precision in AUTOCAST_DTYPES
        and isinstance(batch, int)
        and isinstance(imgsz, int)
    ):
        return None
    shape = (batch, 3, imgsz, imgsz)
    return KernelWarmUp(net, shape, device, memory_format, AUTOCAST_DTYPES[precision])


__all__ = ["AUTOCAST_DTYPES", "DEVICE_TYPES", "KernelWarmUp", "start_kernel_warm_up"]
