"""The layout of the gradients native autograd hands a region's outputs, learned at warm-up.

A recorded backward reads each output's incoming gradient from a static buffer, and the kernels
captured over it were chosen for that buffer's strides: a reduction over the gradient (a conv's
bias gradient sums it over batch and space) may run in another order over an NCHW tensor than
over a channels-last one, and round differently. Natively the gradient keeps whatever layout the
code after the region produced (a loss over ``channels_last`` logits may hand back an NCHW
gradient). So the static buffers take the strides of the gradients seen on the native warm-up
calls, and a replayed backward whose incoming gradient has other strides is reported.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

Strides = tuple[int, ...]


def dense(tensor: Tensor) -> bool:
    """Whether ``tensor`` covers its memory without gaps or overlaps (any dimension order)."""
    expected = 1
    spans = zip(tensor.stride(), tensor.shape, strict=True)
    for stride, size in sorted((s, n) for s, n in spans if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def same_layout(a: Tensor, b: Tensor) -> bool:
    """Equal strides on every dimension longer than one (a size-1 stride is never read)."""
    return all(
        sa == sb or n == 1 for sa, sb, n in zip(a.stride(), b.stride(), a.shape, strict=True)
    )


class GradLayouts:
    """Per signature, the strides of the dense gradient each output index received natively."""

    def __init__(self) -> None:
        self._learned: dict[Any, dict[int, Strides]] = {}

    def watch(self, key: object, outputs: Sequence[Tensor]) -> None:
        """Learn, under ``key``, the strides of the gradients the differentiable ``outputs`` of a
        native call receive.

        The hook sits on each output's autograd node, not on the tensor: node pre-hooks run
        after every tensor hook, so it sees the gradient as the node (and a replay) gets it,
        even when the caller's own hooks change its layout. It returns nothing, so the
        gradients are untouched.
        """
        learned = self._learned.setdefault(key, {})
        for index, output in enumerate(outputs):
            if output.grad_fn is not None:
                output.grad_fn.register_prehook(
                    functools.partial(_learn, learned, index, output.output_nr)
                )

    def static_buffer(self, key: object, index: int, output: Tensor) -> Tensor:
        """A zero gradient buffer for ``output``: with the learned native strides, else with
        the output's own layout (``zeros_like``)."""
        stride = self._learned.get(key, {}).get(index)
        if stride is None or len(stride) != output.dim():
            return torch.zeros_like(output)
        return torch.empty_strided(
            output.shape, stride, dtype=output.dtype, device=output.device
        ).zero_()


def _learn(
    learned: dict[int, Strides], index: int, slot: int, grads: tuple[Tensor | None, ...]
) -> None:
    grad = grads[slot]
    if grad is not None and dense(grad):
        learned[index] = tuple(grad.stride())


__all__ = ["GradLayouts", "dense", "same_layout"]
