"""A YOLO26 network whose convolutions' autocast casts run as one pass (tools only).

Why (issue 11, session 46): the batch-4 rows are bounded by the device's steady step, which is
many small kernels (session 35 on the H200: 3,251 a step, 2,958 of them under 10 µs). Under
autocast every convolution casts its float32 weight (and bias) to the autocast dtype in the
forward, and autograd casts each of their gradients back in the backward: one kernel per tensor
each way, 138 tensors in yolo26n (126 weights, 12 biases: ``ToCopyBackward0`` nodes in its
backward graph). ``torch._foreach_copy_`` converts a whole list in a few multi-tensor launches
when every source shares one dtype and every target another (its CUDA fast path skips the dtype
check between the lists), rounding as a cast does: float32 to bfloat16 to nearest even, and
bfloat16 to float32 exactly. So the network should compute the same bits with some 270 fewer
launches a step. This wrapper lets the benchmarks time that (``channels_last+fused-casts`` in
``tools/bench_memory_format.py``) before the models package decides anything.

Limits: the same bits were shown on the CPU only, where ``_foreach_copy_`` copies tensor by
tensor; the CUDA fast path is not yet run. And only for one forward per autocast region:
autocast casts a weight once per region and sums the low-precision gradients of its uses before
casting back, where this casts at every forward and sums in float32.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

VARIANT = "channels_last+fused-casts"
"""The variant's name in the layout benchmarks."""


class _CastAll(torch.autograd.Function):
    """``tensors`` in ``dtype`` in one ``_foreach_copy_``; their gradients back the same way."""

    @staticmethod
    def forward(ctx: Any, dtype: torch.dtype, *tensors: Tensor) -> tuple[Tensor, ...]:
        ctx.dtypes = [t.dtype for t in tensors]
        return _cast(list(tensors), dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, ...]:
        present = [i for i, g in enumerate(grads) if g is not None]
        full = iter(_cast([grads[i] for i in present], [ctx.dtypes[i] for i in present]))
        back = [next(full) if g is not None else None for g in grads]
        return (None, *back)


def _cast(tensors: list[Any], dtypes: torch.dtype | list[torch.dtype]) -> tuple[Tensor, ...]:
    """``tensors`` converted to ``dtypes`` (one for all, or one each) by one ``_foreach_copy_``,
    each keeping its strides."""
    targets = dtypes if isinstance(dtypes, list) else [dtypes] * len(tensors)
    out = [torch.empty_like(t, dtype=d) for t, d in zip(tensors, targets, strict=True)]
    if out:
        torch._foreach_copy_(out, tensors)
    return tuple(out)


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
        if not self.convs:
            raise ValueError(f"{type(model).__name__} has no Conv2d: nothing to cast")
        self._casts: dict[int, tuple[Tensor, Tensor | None]] = {}
        for conv in self.convs:
            conv.forward = self._forward_of(conv)  # type: ignore[method-assign]
        model.register_forward_pre_hook(lambda module, args: self._cast())
        model.register_forward_hook(lambda module, args, output: self._casts.clear())

    def _cast(self) -> None:
        """The casts of this forward: trainable tensors through :class:`_CastAll`, frozen ones
        without a gradient (as autocast casts them); none outside autocast."""
        self._casts.clear()  # a forward that raised left its casts
        device = self.convs[0].weight.device.type
        if not torch.is_autocast_enabled(device):
            return
        dtype = torch.get_autocast_dtype(device)
        tensors = [t for c in self.convs for t in (c.weight, c.bias) if t is not None]
        trainable = [t for t in tensors if t.requires_grad]
        frozen = [t for t in tensors if not t.requires_grad]
        with torch.no_grad():
            casts = list(zip(frozen, _cast(frozen, dtype), strict=True))
        if trainable:
            casts += zip(trainable, _CastAll.apply(dtype, *trainable), strict=True)
        cast = {id(t): low for t, low in casts}
        for conv in self.convs:
            bias = None if conv.bias is None else cast[id(conv.bias)]
            self._casts[id(conv)] = (cast[id(conv.weight)], bias)

    def _forward_of(self, conv: nn.Conv2d) -> Any:
        def forward(x: Tensor) -> Tensor:
            weight, bias = self._casts.get(id(conv), (conv.weight, conv.bias))
            return conv._conv_forward(x, weight, bias)

        return forward


def fuse_weight_casts(model: nn.Module) -> int:
    """Have ``model``'s convolutions read one fused cast of their parameters; how many."""
    return len(FusedWeightCasts(model).convs)
