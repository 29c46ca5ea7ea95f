"""Constants of the metric (IoU thresholds, OKS sigmas) on the device, copied there once.

Copying a host tensor to the GPU waits for the GPU's queue to drain, so a constant built on the
host for every image or batch would stall a validation loop once per call (issue 11). Each
distinct constant is copied once per device and kept for the life of the process: CUDA graphs
that read one (the replayed matching and scoring) read it by address, so it must never be let
go while they live. The metric asks for a handful (the IoU thresholds, a set of OKS sigmas per
keypoint count).
"""

from __future__ import annotations

from functools import cache

import torch
from torch import Tensor


def float64_constant(values: tuple[float, ...], device: torch.device) -> Tensor:
    """(len(values),) float64 ``values`` on ``device``; the same tensor on every call.

    Callers must not modify it in place.
    """
    if device.type == "cpu":
        return torch.tensor(values, dtype=torch.float64)
    return _cached(values, device)


@cache
def _cached(values: tuple[float, ...], device: torch.device) -> Tensor:
    # from pinned memory the copy is queued: even the first use does not wait for the device
    host = torch.tensor(values, dtype=torch.float64).pin_memory()
    return host.to(device, non_blocking=True)


__all__ = ["float64_constant"]
