"""Counts the ATen operators a block of code dispatches, by name: the tools' view of kernels.

The tools count on the CPU what a CUDA run would launch, since an operator dispatched is a kernel
launched there (views aside, which launch none). ``tests/helpers/dispatched_ops.py`` is the
tests' own counter: tests load tools by path and keep no tool importable.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

VIEW_OPS = frozenset({"view", "_unsafe_view", "expand", "transpose", "unbind", "t", "reshape"})
"""Dispatched operators that launch no kernel."""


class DispatchCount(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch stub gap
    """``with DispatchCount() as seen: ...`` then ``seen.ops["bmm"]``: calls per operator, the
    names in ``ignore`` left out."""

    def __init__(self, ignore: frozenset[str] = frozenset()) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ignore = ignore
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(func.overloadpacket.__name__)
        if name not in self.ignore:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))
