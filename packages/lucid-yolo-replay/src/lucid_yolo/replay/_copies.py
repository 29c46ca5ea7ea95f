"""Many tensor copies as a few kernels: ``torch._foreach_copy_`` per device and dtype.

A replayed step copies hundreds of small tensors (live gradients into an update graph's static
buffers, BatchNorm statistics into an EMA). One ``copy_`` per tensor is one kernel each: launched
by the host natively, a node each inside a graph. ``_foreach_copy_`` takes its fast path only when
every tensor of a call shares device and dtype (else it copies one by one), hence the grouping.
A copy writes the source's bits, so the grouped form changes no result.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def copy_grouped(destinations: Sequence[Tensor], sources: Sequence[Tensor]) -> None:
    """``d.copy_(s)`` for every pair, one ``_foreach_copy_`` per (device, dtype) of ``d``.

    Raises:
        ValueError: (from ``zip``) when the sequences differ in length.
    """
    groups: dict[tuple[torch.device, torch.dtype], tuple[list[Tensor], list[Tensor]]] = {}
    for destination, source in zip(destinations, sources, strict=True):
        targets, values = groups.setdefault((destination.device, destination.dtype), ([], []))
        targets.append(destination)
        values.append(source)
    for targets, values in groups.values():
        torch._foreach_copy_(targets, values)


def fresh_copy(live: Tensor) -> Tensor:
    """A new buffer with ``live``'s shape, strides and dtype, holding its values: a recording's
    static input, a leaf without autograd history. Made outside inference mode, so that a later
    call outside it may copy into it (leaving inference mode turns gradients on, hence
    ``no_grad`` too).
    """
    with torch.inference_mode(False), torch.no_grad():
        return torch.empty_strided(
            live.shape, live.stride(), dtype=live.dtype, device=live.device
        ).copy_(live)


__all__ = ["copy_grouped", "fresh_copy"]
