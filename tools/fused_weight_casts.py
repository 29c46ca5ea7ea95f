"""A YOLO26 network whose convolutions' autocast casts run as one pass (tools only).

Why (issue 11, session 46): the batch-4 rows are bounded by the device's steady step, which is
many small kernels (session 35 on the H200: 3,251 a step, 2,958 of them under 10 µs). Under
autocast every convolution casts its float32 weight (and bias) to the autocast dtype in the
forward, and autograd casts each of their gradients back in the backward: one kernel per tensor
each way, 126 convolutions in yolo26n (the CPU profiler's count: 142 ``ToCopyBackward0`` a
backward). ``torch._foreach_copy_`` converts a whole list in a few multi-tensor launches when
every source shares one dtype and every target another (its CUDA fast path skips the dtype
check), with the same rounding as a cast: float32 to bfloat16 rounds to nearest even either
way, and bfloat16 to float32 is exact. So the network computes the same bits with some 280
fewer launches a step. This wrapper lets the benchmarks time that (``channels_last+fused-casts``
in ``tools/bench_memory_format.py``) before the models package decides anything.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

VARIANT = "channels_last+fused-casts"
"""The variant's name in the layout benchmarks."""


class _CastAll(torch.autograd.Function):
    """``tensors`` in ``dtype`` in one ``_foreach_copy_``; their gradients back the same way."""

    @staticmethod
    def forward(ctx: Any, dtype: torch.dtype, *tensors: Tensor) -> tuple[Tensor, ...]:
        ctx.dtypes = [t.dtype for t in tensors]
        low = [torch.empty_like(t, dtype=dtype) for t in tensors]  # each keeps its strides
        torch._foreach_copy_(low, list(tensors))
        return tuple(low)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, ...]:
        present = [i for i, g in enumerate(grads) if g is not None]
        sources = [grads[i] for i in present]
        full = [
            torch.empty_like(g, dtype=ctx.dtypes[i]) for i, g in zip(present, sources, strict=True)
        ]
        if full:
            torch._foreach_copy_(full, sources)
        back: list[Tensor | None] = [None] * len(grads)
        for i, g in zip(present, full, strict=True):
            back[i] = g
        return (None, *back)


class FusedWeightCasts:
    """Casts every ``Conv2d`` weight and bias of ``model`` at once before each autocast
    forward, and has the convolutions read those casts (autocast leaves a tensor already in its
    dtype as it is). Outside autocast the convolutions read their own parameters.

    For a bare network in a benchmark: the convolutions' ``forward`` and the model's hooks are
    closures over this object, so a deep copy of the wrapped model (an EMA's) would still cast
    and read the original's parameters. Wrap a copy after making it, never before.
    """

    def __init__(self, model: nn.Module) -> None:
        self.convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
        self._casts: dict[int, tuple[Tensor, Tensor | None]] = {}
        for conv in self.convs:
            conv.forward = self._forward_of(conv)  # type: ignore[method-assign]
        model.register_forward_pre_hook(lambda module, args: self._cast())
        model.register_forward_hook(lambda module, args, output: self._casts.clear())

    def _cast(self) -> None:
        device = self.convs[0].weight.device.type
        if not torch.is_autocast_enabled(device):
            return
        tensors = [t for c in self.convs for t in (c.weight, c.bias) if t is not None]
        cast = iter(_CastAll.apply(torch.get_autocast_dtype(device), *tensors))
        for conv in self.convs:
            weight = next(cast)
            self._casts[id(conv)] = (weight, None if conv.bias is None else next(cast))

    def _forward_of(self, conv: nn.Conv2d) -> Any:
        def forward(x: Tensor) -> Tensor:
            weight, bias = self._casts.get(id(conv), (conv.weight, conv.bias))
            return conv._conv_forward(x, weight, bias)

        return forward


def fuse_weight_casts(model: nn.Module) -> int:
    """Have ``model``'s convolutions read one fused cast of their parameters; how many."""
    return len(FusedWeightCasts(model).convs)
