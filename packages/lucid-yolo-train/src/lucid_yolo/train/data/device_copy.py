"""A batch's host-to-device copies on a stream of their own, beside the step in flight.

Why (issue 11, session 43): on the current stream a batch's copies queue behind the step the
host has already launched, so they run between two steps while the device does nothing else
(with the pixel work, 1.2-1.3 ms of a replayed batch-16 step's period on an H100: the
data-wait row's device share). On a stream of their own they run on a copy engine while that
step computes; the current stream waits for them before its next work. The price is memory: a
copy's buffers return to the copy stream only once the steps that read them are done, so up to
two more batches may sit on the device. ``YoloDataModule(copy_stream=True)`` turns it on; it is
off by default until both sides are measured on a GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

import torch
from torch import Tensor

from lucid_yolo.train.data.packed_batch import PackedBatch

Moved = TypeVar("Moved")


def beside_the_step(device: torch.device, move: Callable[[], Moved]) -> Moved:
    """``move()`` (a batch's copies to ``device``) run on the device's copy stream, its result
    ready for the current stream's next work; on any other device ``move()`` as it is.

    Each CUDA tensor of the result is marked as used by the current stream
    (``record_stream``): the caching allocator gives its memory back to the copy stream only
    once the current stream's work queued by then is done, so a later batch's copy never
    overwrites a buffer a step still reads. The caching host allocator keeps a pinned source
    alive until its copy is done.
    """
    if device.type != "cuda":
        return move()
    if device.index is None:
        device = torch.device(device.type, torch.cuda.current_device())
    consumer = torch.cuda.current_stream(device)
    copier = _copy_stream(device)
    with torch.cuda.stream(copier):
        moved = move()
    consumer.wait_stream(copier)
    for tensor in _cuda_tensors(moved):
        tensor.record_stream(consumer)
    return moved


def _cuda_tensors(value: object) -> Iterator[Tensor]:
    """The CUDA tensors of a moved batch: a tensor, a packed batch's buffer, or those inside a
    mapping, list or tuple."""
    if isinstance(value, Tensor):
        if value.is_cuda:
            yield value
    elif isinstance(value, PackedBatch):
        yield from _cuda_tensors(value.buffer)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _cuda_tensors(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _cuda_tensors(item)


@functools.cache
def _copy_stream(device: torch.device) -> torch.cuda.Stream:
    """The one copy stream of ``device`` in this process, from PyTorch's high-priority streams.

    PyTorch hands its pooled streams out round robin, one set per priority, and the replay
    pools' side streams take the default priority: a copy stream from that set could be a
    pool's side stream, whose allocations a warm-up or a loan routes into the pool (replay
    invariant 18). No pooled stream waits for the default stream.
    """
    return torch.cuda.Stream(device, priority=-1)  # type: ignore[no-untyped-call]


__all__ = ["beside_the_step"]
