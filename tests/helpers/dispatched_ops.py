"""Counts the ATen operators a block of code dispatches, by name (a test's view of kernels)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class DispatchedOps(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch stub gap
    """``with DispatchedOps() as seen: ...`` then ``seen.ops["copy_"]``: calls per operator."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))
