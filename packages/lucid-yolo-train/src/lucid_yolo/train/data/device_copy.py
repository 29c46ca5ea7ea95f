"""A batch's host-to-device copies on a stream of their own, beside the step in flight.

Why (issue 11, session 43): on the current stream a batch's copies queue behind the step the
host has already launched, so they run between two steps while the device does nothing else
(with the pixel work, 1.2-1.3 ms of a replayed batch-16 step's period on an H100: the data-wait
row's device share). On a stream of their own they can run on a copy engine while that step
computes; the current stream waits for them before its next work. The price is memory: a
copy's buffers return to the copy stream only once the steps that read them are done, so up to
two more batches may sit on the device. ``YoloDataModule(copy_stream=True)`` turns it on. It is
off by default: in session 44's 3-epoch detect fits on an H100 it lengthened the device's time
between batch-16 steps (1.32 to 1.74 ms), shortened it at batch 4 (1.40 to 1.01 ms) and raised
both replayed peaks by 0.04 GiB, the batch-4 fit's to 1.117x native. The copies overlap a
step only where the host runs ahead of the device: in a multi-process fit Lightning 2.6 reads a
tensor back to the host before each batch's fetch (its SIGTERM broadcast, read from its training
epoch loop), so there the device is idle at every transfer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

import torch
from torch import Tensor

from lucid_yolo.train.data.batch import HOST_FIELDS
from lucid_yolo.train.data.packed_batch import PackedBatch

Moved = TypeVar("Moved")


def beside_the_step(device: torch.device, move: Callable[[], Moved]) -> Moved:
    """``move()`` (a batch's copies to ``device``) run on the device's copy stream, its result
    ready for the current stream's next work; on any other device, or a GPU without a second
    stream priority (below), ``move()`` as it is.

    Each CUDA tensor of the result is marked as used by the current stream
    (``record_stream``): when it is freed, the caching allocator gives its memory back to the
    copy stream only once the current stream's work queued by then is done, so a later batch's
    copy never overwrites a buffer a step still reads. The caching host allocator keeps a
    pinned source alive until its copy is done.
    """
    if device.type != "cuda":
        return move()
    if device.index is None:
        device = torch.device(device.type, torch.cuda.current_device())
    copier = _copy_stream(device)
    if copier is None:
        return move()
    consumer = torch.cuda.current_stream(device)
    with torch.cuda.stream(copier):
        moved = move()
    consumer.wait_stream(copier)
    for tensor in _cuda_tensors(moved):
        tensor.record_stream(consumer)
    return moved


def _cuda_tensors(value: object) -> Iterator[Tensor]:
    """The CUDA tensors of a moved batch: a tensor, a packed batch's buffer, or those inside a
    mapping (its host fields left unwalked), list or tuple."""
    if isinstance(value, Tensor):
        if value.is_cuda:
            yield value
    elif isinstance(value, PackedBatch):
        yield from _cuda_tensors(value.buffer)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if key not in HOST_FIELDS:
                yield from _cuda_tensors(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _cuda_tensors(item)


@functools.cache
def _copy_stream(device: torch.device) -> torch.cuda.Stream | None:
    """The one copy stream of ``device`` in this process, from the pooled streams of the
    priority above the default; ``None`` where the device has no such priority.

    PyTorch hands its pooled streams out round robin, one set per priority level, and the
    replay pools' side streams take the default priority: a copy stream from that set could be
    a pool's side stream, whose allocations a warm-up or a loan routes into the pool (replay
    invariant 18). A device with a single priority level would put the copy stream in that set,
    so there the copies stay on the current stream. No pooled stream waits for the default
    stream; the priority itself does not speed a copy.
    """
    stream = torch.cuda.Stream(device, priority=-1)  # type: ignore[no-untyped-call]
    return None if stream.priority == 0 else stream


__all__ = ["beside_the_step"]
