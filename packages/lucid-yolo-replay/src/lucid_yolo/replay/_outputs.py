"""Flattening region outputs to a tuple of tensors and back, keyed by output name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torch import Tensor

from lucid_yolo.replay.exceptions import ReplayConfigError
from lucid_yolo.replay.protocols import RegionOutput

MAX_GROUPS = 3
"""A backward graph is recorded per non-empty subset of groups: at most 2**3 - 1 = 7."""


@dataclass(frozen=True)
class OutputLayout:
    """How to rebuild a region's output from a flat tuple.

    Attributes:
        kind: ``"tensor"``, ``"tuple"``, ``"list"`` or ``"mapping"``.
        keys: output names in flat order (``"0"``, ``"1"`` ... for sequences).
    """

    kind: str
    keys: tuple[str, ...]

    @classmethod
    def flatten(cls, output: RegionOutput) -> tuple[OutputLayout, tuple[Tensor, ...]]:
        """Split ``output`` into its layout and its tensors.

        Raises:
            ReplayConfigError: when the output is not a tensor, sequence or mapping of tensors.
        """
        if isinstance(output, Tensor):
            return cls("tensor", ("0",)), (output,)
        if isinstance(output, Mapping):
            items = tuple(output.items())
            layout = cls("mapping", tuple(str(k) for k, _ in items))
            tensors = tuple(v for _, v in items)
        elif isinstance(output, (tuple, list)):
            kind = "tuple" if isinstance(output, tuple) else "list"
            layout, tensors = cls(kind, tuple(str(i) for i in range(len(output)))), tuple(output)
        else:
            raise ReplayConfigError(
                f"a region returned {type(output).__name__!r}: return a tensor, a tuple/list of "
                "tensors or a dict[str, Tensor]"
            )
        bad = [k for k, t in zip(layout.keys, tensors, strict=True) if not isinstance(t, Tensor)]
        if bad:
            raise ReplayConfigError(
                f"region outputs {bad!r} are not tensors: return only tensors from a region"
            )
        return layout, tensors

    def rebuild(self, tensors: Sequence[Tensor]) -> RegionOutput:
        """Inverse of :meth:`flatten`."""
        if self.kind == "tensor":
            return tensors[0]
        if self.kind == "mapping":
            return dict(zip(self.keys, tensors, strict=True))
        return tuple(tensors) if self.kind == "tuple" else list(tensors)

    def group_indices(self, groups: Mapping[str, Sequence[str]]) -> dict[str, tuple[int, ...]]:
        """Flat indices of each prediction group.

        An empty mapping makes each output its own group when there are at most
        :data:`MAX_GROUPS` outputs, else puts all outputs in one group named ``"outputs"``.

        Raises:
            ReplayConfigError: when a group names an unknown key, a key is in no group, or
                there are more than :data:`MAX_GROUPS` groups.
        """
        if not groups:
            if len(self.keys) <= MAX_GROUPS:
                return {k: (i,) for i, k in enumerate(self.keys)}
            return {"outputs": tuple(range(len(self.keys)))}
        if len(groups) > MAX_GROUPS:
            raise ReplayConfigError(
                f"{len(groups)} prediction groups {list(groups)!r}: at most {MAX_GROUPS} are "
                "supported (one backward graph per subset); merge groups that are always used "
                "together"
            )
        index = {k: i for i, k in enumerate(self.keys)}
        unknown = [k for keys in groups.values() for k in keys if k not in index]
        if unknown:
            raise ReplayConfigError(
                f"prediction groups name outputs {unknown!r} that the region does not return; "
                f"its outputs are {list(self.keys)!r}"
            )
        covered = {k for keys in groups.values() for k in keys}
        missing = [k for k in self.keys if k not in covered]
        if missing:
            raise ReplayConfigError(
                f"outputs {missing!r} belong to no prediction group: add them to a group"
            )
        return {name: tuple(index[k] for k in keys) for name, keys in groups.items()}


__all__ = ["MAX_GROUPS", "OutputLayout"]
