"""The convolutions' autocast casts made together: one multi-tensor copy forward, one a block
back.

Under autocast every convolution casts its float32 weight and bias to the autocast dtype in the
forward, and autograd casts their gradients back in the backward: a kernel per tensor each way,
276 small launches a training step in yolo26n (126 weights, 12 biases), where the batch-4 step
is bound by its many small kernels (issue 11). ``torch._foreach_copy_`` converts a whole list of
tensors in a few multi-tensor launches, rounding as a single cast does (float32 to bfloat16 to
nearest even, bfloat16 to float32 exactly), so :func:`casting_weights` casts all of a part's
trainable convolution tensors at once and its :class:`CastConv2d` layers read those casts.
Autocast leaves a tensor already in its dtype as it is, so the convolution computes the same
bits.

The gradients go back to float32 one block at a time (a backbone stage, a neck block, a head
branch set), once the backward has left the block, and a gradient hook sees a block's gradients
together.

Only a forward that records a graph casts together: there autocast, too, keeps every cast of a
trainable weight until the backward (the convolution saves it). Frozen tensors, and everything
under ``torch.no_grad()`` (an evaluation forward), are left to autocast, which frees each cast
right after its convolution; a scope would hold all of a part's until its end.

One difference from autocast remains: two forwards through the same layers inside one autocast
region with one backward over both. Autocast casts a trainable weight once per region and sums
the low-precision gradients of its uses before casting back; scopes cast at each entry and sum
each use's float32 gradient. A training step enters each scope once per autocast region.

:attr:`YOLO26.casts_weights_together <lucid_yolo.models.YOLO26>` turns this on.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

import torch
from torch import Tensor, nn
from torch.amp.autocast_mode import is_autocast_available
from torch.autograd.function import once_differentiable

_LayerInputs = tuple[Tensor, Tensor | None]
"""A layer's weight and bias as it reads them."""

_AUTOCAST_CASTS = frozenset({torch.float32, torch.float16, torch.bfloat16})
"""Parameter dtypes autocast casts to its dtype (it leaves float64 alone)."""

_SCOPE: ContextVar[Mapping[nn.Module, _LayerInputs]] = ContextVar(
    "lucid_yolo_weight_casts", default=MappingProxyType({})
)
"""What each layer of the scopes entered in this context reads."""

_BLOCKS: weakref.WeakKeyDictionary[nn.Module, tuple[tuple[CastConv2d, ...], ...]] = (
    weakref.WeakKeyDictionary()
)
"""The :class:`CastConv2d` blocks of each module a scope was entered for."""


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
    """Cast the trainable weights and biases of every :class:`CastConv2d` under ``modules`` to
    the autocast dtype together, for the layers run inside this scope.

    Casts only under autocast (of the first layer's device type) with grad enabled; a tensor
    autocast would not cast (float64, or already in the autocast dtype) or that is frozen is left
    to autocast at the layer.
    """
    blocks = [block for module in modules for block in _blocks(module)]
    dtype = _cast_dtype(blocks)
    if dtype is None:
        yield
        return
    token = _SCOPE.set({**_SCOPE.get(), **_layer_inputs(blocks, dtype)})
    try:
        yield
    finally:
        _SCOPE.reset(token)


def _cast_dtype(blocks: Sequence[Sequence[CastConv2d]]) -> torch.dtype | None:
    """The dtype to cast to: autocast's, where a scope casts at all (see
    :func:`casting_weights`)."""
    if not blocks or not torch.is_grad_enabled():
        return None
    device = blocks[0][0].weight.device.type
    if not (is_autocast_available(device) and torch.is_autocast_enabled(device)):
        return None
    return torch.get_autocast_dtype(device)


def _layer_inputs(
    blocks: Sequence[Sequence[CastConv2d]], dtype: torch.dtype
) -> dict[nn.Module, _LayerInputs]:
    """Each layer's weight and bias: the trainable ones autocast would cast, cast by one copy
    and joined to the graph one block at a time; the others as they are."""
    castable = _AUTOCAST_CASTS - {dtype}
    per_block = [
        [
            t
            for layer in block
            for t in (layer.weight, layer.bias)
            if t is not None and t.requires_grad and t.dtype in castable
        ]
        for block in blocks
    ]
    every = [t for trainable in per_block for t in trainable]
    with torch.no_grad():
        cast_of = dict(zip(map(id, every), _converted(every, [dtype] * len(every)), strict=True))
    for trainable in filter(None, per_block):
        casts = [cast_of[id(t)] for t in trainable]
        joined = _GradientsBack.apply(casts, *trainable)
        cast_of.update(zip(map(id, trainable), joined, strict=True))
    inputs: dict[nn.Module, _LayerInputs] = {}
    for layer in (layer for block in blocks for layer in block):
        weight, bias = layer.weight, layer.bias
        inputs[layer] = (
            cast_of.get(id(weight), weight),
            None if bias is None else cast_of.get(id(bias), bias),
        )
    return inputs


def _blocks(module: nn.Module) -> tuple[tuple[CastConv2d, ...], ...]:
    """The :class:`CastConv2d` layers under ``module``, one block per child (a backbone stage,
    a neck block, a head branch set), found on the module's first scope.

    A block's gradients go back to float32 once the backward has left the block, so that only a
    block's low-precision gradients wait for their cast, and the parameters' gradients arrive
    during the backward (one node for a whole part held them all to its end). Walking the module
    tree each forward would cost about 0.34 ms of the dev machine's host time, hence the cache:
    a layer added to the module after its first scope is left to autocast (the same bits, its
    own cast), and one replaced is still cast, and kept, as long as the module lives.
    """
    blocks = _BLOCKS.get(module)
    if blocks is None:
        children = list(module.children()) or [module]
        found = (tuple(m for m in c.modules() if isinstance(m, CastConv2d)) for c in children)
        blocks = _BLOCKS[module] = tuple(filter(None, found))
    return blocks


class _GradientsBack(torch.autograd.Function):
    """Hands out ``casts`` (made of ``tensors`` by the scope's one copy) as the tensors' casts
    in the graph; the backward casts their gradients back to each tensor's dtype by one copy.

    ``casts`` travels as a list, which autograd does not take for an input: the casts are this
    node's outputs, and ``tensors`` its inputs.
    """

    @staticmethod
    def forward(ctx: Any, casts: list[Tensor], *tensors: Tensor) -> tuple[Tensor, ...]:
        ctx.dtypes = [t.dtype for t in tensors]
        ctx.set_materialize_grads(False)
        return tuple(casts)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, ...]:
        arrived = [(g, dtype) for g, dtype in zip(grads, ctx.dtypes, strict=True) if g is not None]
        back = iter(_converted([g for g, _ in arrived], [dtype for _, dtype in arrived]))
        return (None, *(None if g is None else next(back) for g in grads))


def _converted(tensors: Sequence[Tensor], dtypes: Sequence[torch.dtype]) -> tuple[Tensor, ...]:
    """Each tensor converted to its dtype by one ``_foreach_copy_``, keeping its strides."""
    out = [torch.empty_like(t, dtype=d) for t, d in zip(tensors, dtypes, strict=True)]
    if out:
        torch._foreach_copy_(out, list(tensors))
    return tuple(out)


__all__ = ["CastConv2d", "casting_weights"]
