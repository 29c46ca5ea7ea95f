"""A device tensor's copy on the host, started behind the queued work and read later.

Reading a GPU tensor on the host (``.tolist()``, ``.cpu()``) waits until the device has run
everything queued before it, so the next batch's (or step's) work cannot be queued meanwhile
(issue 11).
Started early into pinned memory, the copy runs in the device's order, behind the work that
produces the tensor; read one batch later, it has long finished, and the host waits for that
copy alone (its event), never for the work queued after it.
"""

from __future__ import annotations

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


__all__ = ["HostCopy"]
