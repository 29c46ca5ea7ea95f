"""Private gradients reused from one replayed backward to the next, when nothing else holds them.

A replayed backward hands each parameter without a gradient a private tensor that AccumulateGrad
adopts as ``.grad`` (invariant 2), and ``zero_grad(set_to_none=True)`` drops it after the update.
Natively that is one allocation and one free a parameter a step; in a replayed step at small
batch, where the host's work sets the pace, the 366 allocations and frees of yolo26n cost about
4 ms of a 23 ms step on the H200's host (session 30's host split: ``cloned`` 2.5 ms,
``Optimizer.zero_grad`` 1.8 ms).

So the recorder takes back, once autograd has adopted them, the tensors it handed, and at the next
backward gives each one out again, its contents overwritten by the new gradient, but only when
nothing but the recycler holds it any more: no ``.grad``, no Python name, no C++ owner such as an
optimizer's state or a saved tensor, no view or alias of its storage. Overwriting it is then
invisible; otherwise the parameter gets a new tensor, as natively. The tensor is the same size and
layout as a new one would be and receives the same bits.

Ownership is read from reference counts: the Python object's (``sys.getrefcount``), the
tensor's (``Tensor._use_count``) and its storage's (``torch._C._storage_Use_Count``), compared
with those of a tensor the recycler alone holds, measured once the same way (:data:`_SOLE`), so
the comparison does not depend on how the interpreter counts a call's own references. A weak
reference is not counted: a ``weakref`` to an old ``.grad`` would see the new values instead of
a dead object.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter, is_not

import torch
from torch import Tensor

_GRAD = attrgetter("grad")

Owners = tuple[int, int, int]
"""A tensor's Python, tensor and storage reference counts, as :func:`_owners` reads them."""


def _owners(tensor: Tensor) -> Owners:
    storage = tensor.untyped_storage()
    return (
        sys.getrefcount(tensor),
        tensor._use_count(),
        torch._C._storage_Use_Count(storage._cdata),
    )


def _owner_counts(kept: Sequence[Tensor | None]) -> list[Owners | None]:
    """Every kept tensor's counts; the one place they are read, so :data:`_SOLE` compares."""
    return [None if t is None else _owners(t) for t in kept]


def _sole_owner_counts() -> Owners | None:
    if not (hasattr(Tensor, "_use_count") and hasattr(torch._C, "_storage_Use_Count")):
        return None
    return _owner_counts([torch.empty(1)])[0]


_SOLE: Owners | None = _sole_owner_counts()
"""The counts of a tensor that only a kept list holds; ``None`` where torch cannot tell (then
nothing is reused)."""


class GradientRecycler:
    """The private gradients of one recorder's parameters, kept between backwards.

    Args:
        count: how many parameters the recorder hands gradients to.
    """

    def __init__(self, count: int) -> None:
        self._kept: list[Tensor | None] = [None] * count
        self._stopped = False

    def take(self) -> list[Tensor | None]:
        """Per parameter, a kept tensor that nothing else holds any more, given up by the
        recycler (the caller overwrites it and hands it on), or ``None``."""
        kept = self._kept
        taken: list[Tensor | None] = [None] * len(kept)
        # by identity: list.count(None) compares each tensor with ==, which torch answers by
        # raising and catching a TypeError (about 11 ms for 366 tensors on the dev CPU)
        if _SOLE is None or self._stopped or not any(map(is_not, kept, repeat(None))):
            return taken
        for k, counts in enumerate(_owner_counts(kept)):
            if counts == _SOLE:
                taken[k] = kept[k]
                kept[k] = None
        return taken

    def keep_after_backward(
        self, params: Sequence[Tensor], handed: Sequence[Tensor | None]
    ) -> None:
        """At the end of the running backward, keep each parameter's ``.grad`` that is the
        tensor handed to it, or the one already kept (a later micro-batch adds into it).

        Only the handed tensors' addresses are held until then: a reference would make
        AccumulateGrad copy the gradient instead of adopting it.
        """
        addresses = [None if h is None else h.data_ptr() for h in handed]

        def keep() -> None:
            if self._stopped:
                return
            self._kept = [
                g if g is not None and (g is old or g.data_ptr() == address) else None
                for g, old, address in zip(map(_GRAD, params), self._kept, addresses, strict=True)
            ]

        torch.autograd.Variable._execution_engine.queue_callback(keep)

    def stop(self) -> None:
        """Drop every kept tensor and keep no more: the recorder stopped replaying for good
        (possibly in the middle of a backward, from the sharing probe)."""
        self._stopped = True
        self._kept = [None] * len(self._kept)


__all__ = ["GradientRecycler"]
