"""Private gradients reused from one replayed backward to the next, when nothing else holds them.

A replayed backward hands each parameter without a gradient a private tensor that AccumulateGrad
adopts as ``.grad`` (invariant 2), and ``zero_grad(set_to_none=True)`` drops it after the update.
Natively that is one allocation and one free a parameter a step; in a replayed step at small
batch, where the host's work sets the pace, the 366 allocations and frees of yolo26n cost about
4 ms of a 23 ms step on the H200's host (session 30's host split: the allocations 2.5 ms,
``Optimizer.zero_grad`` 1.8 ms).

So the recorder takes back, once autograd has adopted them, the tensors it handed, and at the next
backward gives each one out again, its contents overwritten by the new gradient, but only when
nothing but the recycler holds it any more: no ``.grad``, no Python name, no C++ owner such as an
optimizer's state or a saved tensor, no view, alias or Python handle of its storage. Overwriting
it is then invisible; otherwise the parameter gets a new tensor, as natively. The tensor is the
same size and layout as a new one would be and receives the same bits.

Ownership is read from reference counts: the tensor's Python object's (``sys.getrefcount``), the
tensor's (``Tensor._use_count``), its storage's (``torch._C._storage_Use_Count``) and its storage's
Python object's, compared with those of a tensor the recycler alone holds, measured once the same
way (:data:`_SOLE`), so the comparison does not depend on how the interpreter counts a call's own
references. What no count shows: a weak reference to an old ``.grad`` (it would see the new values
instead of a dead object), attributes set on the ``.grad`` object (they stay on it), and
``record_stream`` (natively the allocator would wait for that stream before reusing the memory;
the next backward writes it at once).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch
from torch import Tensor

from lucid_yolo.replay._getters import GRAD

Owners = tuple[int, int, int, int]
"""A tensor's Python, tensor, storage and storage's Python reference counts (:func:`_owners`)."""


def _owners(tensor: Tensor) -> Owners:
    storage = tensor.untyped_storage()
    return (
        sys.getrefcount(tensor),
        tensor._use_count(),
        torch._C._storage_Use_Count(storage._cdata),
        sys.getrefcount(storage),
    )


def _python_counts(kept: Sequence[Tensor | None]) -> list[int]:
    """The Python reference count of every entry, in one C-level pass: the cheap first filter
    (a kept tensor that is still ``.grad``, under accumulation, fails it)."""
    return list(map(sys.getrefcount, kept))


def _owner_counts(kept: Sequence[Tensor | None], positions: Sequence[int]) -> list[Owners]:
    """The counts of the kept tensors at ``positions``; the one place they are read, so that
    :data:`_SOLE` compares."""
    return [_owners(kept[k]) for k in positions]  # type: ignore[arg-type]


def _sole_owner_counts() -> tuple[int, Owners] | None:
    if not (hasattr(Tensor, "_use_count") and hasattr(torch._C, "_storage_Use_Count")):
        return None
    probe: list[Tensor | None] = [torch.empty(1)]
    return _python_counts(probe)[0], _owner_counts(probe, [0])[0]


_SOLE: tuple[int, Owners] | None = _sole_owner_counts()
"""What :func:`_python_counts` and :func:`_owner_counts` read for a tensor that only the kept
list holds; ``None`` where torch cannot tell (then nothing is reused)."""


def _addresses(handed: Sequence[Tensor | None]) -> list[int | None]:
    return [None if h is None else h.data_ptr() for h in handed]


class GradientRecycler:
    """The private gradients of one recorder's parameters, kept between backwards, one slot per
    parameter of the region (every recording of the recorder shares them, so a parameter has
    one kept gradient whatever the number of signatures).

    Args:
        count: the region's parameters.
    """

    def __init__(self, count: int) -> None:
        self._kept: list[Tensor | None] = [None] * count
        self._stopped = False

    def take(self, positions: Sequence[int]) -> list[Tensor | None]:
        """For the parameters at ``positions``, a kept tensor that nothing else holds any more,
        given up by the recycler (the caller overwrites it and hands it on), or ``None``."""
        kept = self._kept
        taken: list[Tensor | None] = [None] * len(positions)
        if _SOLE is None or self._stopped:
            return taken
        python, sole = _SOLE
        counts = _python_counts(kept)
        candidates = [i for i, k in enumerate(positions) if counts[k] == python]
        if not candidates:
            return taken
        owners = _owner_counts(kept, [positions[i] for i in candidates])
        for i, owned in zip(candidates, owners, strict=True):
            if owned == sole:
                taken[i] = kept[positions[i]]
                kept[positions[i]] = None
        return taken

    def keep_after_backward(
        self, positions: Sequence[int], params: Sequence[Tensor], handed: Sequence[Tensor | None]
    ) -> None:
        """At the end of the running backward, keep each parameter's ``.grad`` that is the
        tensor handed to it, or the one already kept (a later micro-batch adds into it).

        Only the handed tensors' addresses are held until then: a reference would make
        AccumulateGrad copy the gradient instead of adopting it.
        """
        addresses = _addresses(handed)
        torch.autograd.Variable._execution_engine.queue_callback(
            lambda: self._keep(positions, params, addresses)
        )

    def keep_now(
        self, positions: Sequence[int], params: Sequence[Tensor], handed: Sequence[Tensor | None]
    ) -> None:
        """:meth:`keep_after_backward` for gradients the recorder wrote into ``.grad`` itself
        (``direct_gradients``): nothing adopts them later, so they are kept at once."""
        self._keep(positions, params, _addresses(handed))

    def _keep(
        self, positions: Sequence[int], params: Sequence[Tensor], addresses: Sequence[int | None]
    ) -> None:
        if self._stopped:
            return
        kept = self._kept
        for k, grad, address in zip(positions, map(GRAD, params), addresses, strict=True):
            if grad is None or not (grad is kept[k] or grad.data_ptr() == address):
                kept[k] = None
            else:
                kept[k] = grad

    def stop(self) -> None:
        """Drop every kept tensor and keep no more: the recorder stopped replaying for good
        (possibly in the middle of a backward, from the sharing probe)."""
        self._stopped = True
        self._kept = [None] * len(self._kept)


__all__ = ["GradientRecycler"]
