"""What a region, its outputs and an optimizer must provide to be recorded.

Replay knows nothing about any model family: a caller describes a region through these small
protocols and the recorder does the rest. The train package binds them per task (for YOLO26 the
network region returns the ``dict[str, Tensor]`` of raw outputs and its prediction groups are the
``"o2m"`` and ``"o2o"`` branches); a plain PyTorch user wraps a module in :class:`ModuleRegion`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from torch import Tensor, nn

RegionOutput = Tensor | tuple[Tensor, ...] | list[Tensor] | Mapping[str, Tensor]
"""A region returns one tensor, a tuple or list of tensors, or a ``str``-keyed mapping."""


@runtime_checkable
class Region(Protocol):
    """A callable over tensors (and Python scalars) plus the modules whose state it reads.

    Every tensor argument is *static*: the recorder copies it into a buffer of identical shape,
    stride and dtype before each replay, so callers may pass fresh tensors each step. Parameters
    and buffers of :meth:`region_modules` are read in place and must keep their storage.
    """

    def __call__(self, *inputs: Any) -> RegionOutput: ...

    def region_modules(self) -> Sequence[nn.Module]:
        """Modules whose parameters, buffers, flags and hooks the region depends on."""
        ...


@runtime_checkable
class GroupedRegion(Region, Protocol):
    """A region whose outputs form prediction groups that receive gradient independently.

    A group whose loss term is absent from a step (its outputs get no gradient) is filled with
    zeros in the replayed backward, as autograd does for an unused output, and the recorder
    counts such steps per group in its telemetry (``ungraded.<group>``).
    """

    def prediction_groups(self) -> Mapping[str, Sequence[str]]:
        """``{group: output keys}``; every output key belongs to exactly one group."""
        ...


@runtime_checkable
class UpdateOptimizer(Protocol):
    """The part of :class:`torch.optim.Optimizer` a graphed update needs.

    A custom optimizer qualifies when its ``step()`` is a fixed sequence of device ops on
    pre-created state: no ``.item()``, no lazily created state after the first step, and every
    hyperparameter that changes during training held as a device tensor in ``param_groups``.
    """

    param_groups: list[dict[str, Any]]

    def step(self) -> Any:
        """Apply one update in place, reading each parameter's ``.grad``."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Optimizer state, digested by the verifier."""
        ...


class ModuleRegion:
    """Adapter that makes an ``nn.Module`` a :class:`GroupedRegion`.

    Args:
        module: the module to record; its ``forward`` is the region.
        groups: prediction groups of a mapping output; ``None`` puts every output in one group
            named ``"outputs"``.
    """

    def __init__(self, module: nn.Module, groups: Mapping[str, Sequence[str]] | None = None):
        self.module = module
        self.groups = groups

    def __call__(self, *inputs: Any) -> RegionOutput:
        output: RegionOutput = self.module(*inputs)
        return output

    def region_modules(self) -> Sequence[nn.Module]:
        """The wrapped module."""
        return (self.module,)

    def prediction_groups(self) -> Mapping[str, Sequence[str]]:
        """The groups given at construction (empty mapping: one group)."""
        return self.groups or {}


__all__ = ["GroupedRegion", "ModuleRegion", "Region", "RegionOutput", "UpdateOptimizer"]
