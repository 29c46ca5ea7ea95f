"""Many tensor copies as a few kernels: ``torch._foreach_copy_`` per device and dtype.

A replayed step copies hundreds of small tensors (live gradients into an update graph's static
buffers, BatchNorm statistics into an EMA). One ``copy_`` per tensor is one kernel each: launched
by the host natively, a node each inside a graph. ``_foreach_copy_`` takes its fast path only when
every tensor of a call shares device and dtype (else it copies one by one), hence the grouping.
A copy writes the source's bits, so the grouped form changes no result.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter, eq

import torch
from torch import Tensor

_DTYPE = attrgetter("dtype")
_DEVICE = attrgetter("device")


def copy_grouped(destinations: Sequence[Tensor], sources: Sequence[Tensor]) -> None:
    """``d.copy_(s)`` for every pair, one ``_foreach_copy_`` per (device, dtype) of ``d``.

    The common case, every destination of one device and dtype (a step's gradients, a model's
    parameters), is recognised in C-level passes and copied in one call without the grouping
    loop: a replayed step copies a few hundred tensors several times, and at small batch it is
    bound by the host's work (session 29).

    Raises:
        ValueError: when the sequences differ in length.
    """
    if len(destinations) != len(sources):
        raise ValueError(
            f"{len(destinations)} destinations and {len(sources)} sources: one source each"
        )
    if not destinations:
        return
    first = destinations[0]
    if all(map(eq, map(_DTYPE, destinations), repeat(first.dtype))) and all(
        map(eq, map(_DEVICE, destinations), repeat(first.device))
    ):
        torch._foreach_copy_(list(destinations), list(sources))
        return
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
