"""A device tensor's copy on the host, started behind the queued work and read later.

Reading a GPU tensor on the host (``.tolist()``, ``.cpu()``) waits until the device has run
everything queued before it, so the next batch's (or step's) work cannot be queued meanwhile
(issue 11).
Started early into pinned memory, the copy runs in the device's order, behind the work that
produces the tensor; read one batch later, it has long finished, and the host waits for that
copy alone (its event), never for the work queued after it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


class HostCopy:
    """A copy of ``tensor`` on the host, readable once the device has produced it.

    Args:
        tensor: on a CUDA device, copied asynchronously into pinned memory; on another device,
            kept as it is (a CPU tensor is already there).
    """

    def __init__(self, tensor: Tensor) -> None:
        self._ready: torch.cuda.Event | None = None
        if tensor.device.type == "cuda":
            host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            host.copy_(tensor, non_blocking=True)
            self._ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
            self._ready.record()
            tensor = host
        self._tensor = tensor

    def ready(self) -> bool:
        """Whether the copy has landed, so that :meth:`read` will not wait."""
        return self._ready is None or bool(self._ready.query())  # type: ignore[no-untyped-call]

    def read(self) -> Tensor:
        """The host tensor, after waiting for its copy (not for later work)."""
        if self._ready is not None:
            self._ready.synchronize()
        return self._tensor


class HostCopies:
    """Host copies of many tensors as they are now, readable once the device has produced them.

    For a checkpoint's some 1,800 tensors: one pinned buffer per dtype and one event per device,
    so each CUDA tensor costs one queued copy, not an allocation, a copy and an event of its own
    (:class:`HostCopy`). A tensor elsewhere (the CPU) is cloned, since the caller goes on
    changing it. :meth:`read` may run on another thread (the checkpoint writer): it waits for
    each event under that event's device, so the thread touches no other device, and the events
    block instead of spinning.

    Args:
        tensors: what to copy; each copy is contiguous on the CPU, with the tensor's shape and
            dtype, wherever the tensor is.
    """

    def __init__(self, tensors: Sequence[Tensor]) -> None:
        copies: dict[int, Tensor] = {}
        on_device: dict[torch.dtype, list[int]] = {}
        for index, tensor in enumerate(tensors):
            if tensor.device.type == "cuda":
                on_device.setdefault(tensor.dtype, []).append(index)
            else:
                copies[index] = tensor.detach().to(
                    "cpu", copy=True, memory_format=torch.contiguous_format
                )
        for dtype, indices in on_device.items():
            numel = sum(tensors[i].numel() for i in indices)
            buffer = torch.empty(numel, dtype=dtype, pin_memory=True)
            offset = 0
            for index in indices:
                tensor = tensors[index]
                copy = buffer[offset : offset + tensor.numel()].view(tensor.shape)
                copy.copy_(tensor.detach(), non_blocking=True)
                copies[index] = copy
                offset += tensor.numel()
        self._ready: list[tuple[torch.device, torch.cuda.Event]] = []
        for device in {tensors[i].device for indices in on_device.values() for i in indices}:
            with torch.cuda.device(device):  # the copies ran on each source device's stream
                event = torch.cuda.Event(blocking=True)  # type: ignore[no-untyped-call]
                event.record()
            self._ready.append((device, event))
        self._copies = [copies[index] for index in range(len(tensors))]

    def read(self) -> list[Tensor]:
        """The host tensors in the order given, after waiting for their copies (not later work)."""
        for device, event in self._ready:
            with torch.cuda.device(device):
                event.synchronize()
        return self._copies


__all__ = ["HostCopies", "HostCopy"]
