"""The convolutions' autocast casts made together: one multi-tensor copy forward, one a block
back.

Under autocast every convolution casts its float32 weight and bias to the autocast dtype in the
forward, and autograd casts their gradients back in the backward: a kernel per tensor each way,
276 small launches a step in yolo26n (126 weights, 12 biases), where the batch-4 step is bound by
its many small kernels (issue 11). ``torch._foreach_copy_`` converts a whole list of tensors in
a few multi-tensor launches, rounding as a single cast does (float32 to bfloat16 to nearest
even, bfloat16 to float32 exactly), so :func:`casting_weights` casts all of a part's
convolution tensors at once and its :class:`CastConv2d` layers read those casts. Autocast
leaves a tensor already in its dtype as it is, so the convolution computes the same bits.

The gradients go back to float32 one block at a time (a backbone stage, a neck block, a head
branch set), once the backward has left the block: no more than a block's low-precision
gradients wait for their cast, and a gradient hook sees a block's gradients together.

One difference from autocast remains, for a layer run twice inside one scope: autocast casts a
trainable weight once per autocast region and sums the low-precision gradients of its uses
before casting back, where a scope casts on entry and sums each use's float32 gradient. The
network runs each layer once per forward, and a training step enters each scope once.

:attr:`YOLO26.casts_weights_together <lucid_yolo.models.YOLO26>` turns this on; it is off by
default until its memory in a replayed fit is measured (session 47).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

import torch
from torch import Tensor, nn
from torch.amp.autocast_mode import is_autocast_available
from torch.autograd.function import once_differentiable

_Casts = Mapping[nn.Module, tuple[Tensor, Tensor | None]]

_SCOPE: ContextVar[_Casts] = ContextVar("lucid_yolo_weight_casts", default=MappingProxyType({}))
"""The casts of the scopes entered in this context, by layer."""


class CastConv2d(nn.Conv2d):
    """A ``Conv2d`` that reads its weight and bias from the enclosing :func:`casting_weights`
    scope, and its own parameters outside one (state dict, export and ``isinstance`` checks see
    a plain ``Conv2d``)."""

    def forward(self, input: Tensor) -> Tensor:
        weight, bias = _SCOPE.get().get(self, (self.weight, self.bias))
        out: Tensor = self._conv_forward(input, weight, bias)
        return out


@contextmanager
def casting_weights(*modules: nn.Module) -> Iterator[None]:
    """Cast the weights and biases of every :class:`CastConv2d` under ``modules`` to the
    autocast dtype together, for the layers run inside this scope.

    Nothing happens outside autocast (of the first layer's device type), and a tensor autocast
    would not cast (float64, or already in the autocast dtype) is left to the layer. Trainable
    tensors are cast with a graph whose backward casts their gradients back one group at a time
    (:func:`_groups`); frozen ones, or all under ``torch.no_grad()``, without a graph, as
    autocast casts them.
    """
    groups = [group for module in modules for group in _groups(module)]
    device = groups[0][0].weight.device.type if groups else "cpu"
    if not (groups and is_autocast_available(device) and torch.is_autocast_enabled(device)):
        yield
        return
    dtype = torch.get_autocast_dtype(device)
    castable = _AUTOCAST_CASTS - {dtype}
    tracked = torch.is_grad_enabled()
    owned = [[(layer, layer.weight, layer.bias) for layer in group] for group in groups]
    tensors = [
        [t for _, w, b in group for t in (w, b) if t is not None and t.dtype in castable]
        for group in owned
    ]
    trainable = [[t for t in group if tracked and t.requires_grad] for group in tensors]
    with torch.no_grad():
        flat = [t for group in tensors for t in group]
        low = dict(zip(map(id, flat), _copies(flat, dtype), strict=True))
    for group in filter(None, trainable):
        casts = [low[id(t)] for t in group]
        low.update(zip(map(id, group), _GradientsBack.apply(casts, *group), strict=True))
    scope = dict(_SCOPE.get())
    for layer, w, b in (entry for group in owned for entry in group):
        scope[layer] = (low.get(id(w), w), None if b is None else low.get(id(b), b))
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def _groups(module: nn.Module) -> tuple[tuple[CastConv2d, ...], ...]:
    """The :class:`CastConv2d` layers under ``module``, one group per child (a backbone stage,
    a neck block, a head branch set), found on the module's first scope.

    A group's gradients go back to float32 once the backward has left the group, so that only
    a group's low-precision gradients wait for their cast. Session 47's first version, one node
    a forward part, held all of the network's to the end of the backward, and its replayed
    detect batch-4 fit peaked 21 MB higher than one with autocast's casts. Walking the module
    tree costs about 0.34 ms of the dev machine's host time, hence the cache: a layer added to
    the module after its first scope is left to autocast (the same bits, its own cast).
    """
    groups = _GROUPS.get(module)
    if groups is None:
        children = list(module.children()) or [module]
        found = (tuple(m for m in c.modules() if isinstance(m, CastConv2d)) for c in children)
        groups = _GROUPS[module] = tuple(filter(None, found))
    return groups


_AUTOCAST_CASTS = frozenset({torch.float32, torch.float16, torch.bfloat16})
"""Parameter dtypes autocast casts to its dtype (it leaves float64 alone)."""

_GROUPS: weakref.WeakKeyDictionary[nn.Module, tuple[tuple[CastConv2d, ...], ...]] = (
    weakref.WeakKeyDictionary()
)


class _GradientsBack(torch.autograd.Function):
    """Hands out ``casts`` (made of ``tensors``, by the scope's one copy) as the tensors' casts
    in the graph; the backward casts their gradients back to each tensor's dtype by one copy."""

    @staticmethod
    def forward(ctx: Any, casts: list[Tensor], *tensors: Tensor) -> tuple[Tensor, ...]:
        ctx.dtypes = [t.dtype for t in tensors]
        ctx.set_materialize_grads(False)
        return tuple(casts)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, ...]:
        used = [i for i, g in enumerate(grads) if g is not None]
        full = iter(_copies([grads[i] for i in used], [ctx.dtypes[i] for i in used]))
        return (None, *(None if g is None else next(full) for g in grads))


def _copies(tensors: list[Any], dtypes: torch.dtype | list[torch.dtype]) -> tuple[Tensor, ...]:
    """Each tensor converted to its dtype (one for all, or one each), keeping its strides, by
    one ``_foreach_copy_``."""
    each = dtypes if isinstance(dtypes, list) else [dtypes] * len(tensors)
    out = [torch.empty_like(t, dtype=d) for t, d in zip(tensors, each, strict=True)]
    if out:
        torch._foreach_copy_(out, tensors)
    return tuple(out)


__all__ = ["CastConv2d", "casting_weights"]
