"""Shared fixtures of the optimisation tests: a small conv net and an op recorder."""

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

BOOL_MASK_INDEX = "index[bool mask]"
"""Recorded instead of ``index`` when an index is boolean: its output size needs a host read."""

HOST_SYNC_OPS = frozenset(
    {"_local_scalar_dense", "nonzero", "is_nonzero", "masked_select", BOOL_MASK_INDEX}
)
"""aten ops that read a device value on the host (``.item()``, ``bool(t)``, boolean indexing)."""


class OpRecorder(TorchDispatchMode):
    """Records the name of every aten op dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = func._schema.name.removeprefix("aten::")
        indices = args[1] if name == "index" and len(args) > 1 else ()
        if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
            name = BOOL_MASK_INDEX
        self.ops.append(name)
        return func(*args, **(kwargs or {}))


@pytest.fixture
def host_sync_ops() -> frozenset[str]:
    """:data:`HOST_SYNC_OPS`, for tests that assert a step never reads a device value."""
    return HOST_SYNC_OPS


@pytest.fixture
def record_ops() -> Callable[[Callable[[], object]], list[str]]:
    """Run a callable under :class:`OpRecorder` and return the aten op names it dispatched."""

    def run(fn: Callable[[], object]) -> list[str]:
        with OpRecorder() as recorder:
            fn()
        return recorder.ops

    return run


def make_net() -> nn.Module:
    """Conv net whose weights cover wide, tall, equal-shape and linear matrices plus BN vectors.

    Matrix views (rows × cols): 8×27 (3×3 stem), 16×72, two 16×16 (1×1, batched together),
    64×16 (tall 1×1), 16×1×3×3 depthwise → 16×9, and a 10×64 linear.
    """
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.SiLU(),
        nn.Conv2d(8, 16, 3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.SiLU(),
        nn.Conv2d(16, 16, 1),
        nn.Conv2d(16, 16, 1),
        nn.Conv2d(16, 16, 3, padding=1, groups=16),
        nn.Conv2d(16, 64, 1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


@pytest.fixture
def net() -> nn.Module:
    """A freshly initialised :func:`make_net` (seed 0)."""
    torch.manual_seed(0)
    return make_net()


def backward_on(model: nn.Module, seed: int) -> None:
    """Accumulate the gradient of a fixed random regression loss into ``model``'s ``.grad``.

    The inputs are drawn in float32 and cast to the model's dtype, so a float64 model sees the
    same data as a float32 one.
    """
    generator = torch.Generator().manual_seed(seed)
    dtype = next(model.parameters()).dtype
    x = torch.randn(4, 3, 8, 8, generator=generator).to(dtype)
    y = torch.randn(4, 10, generator=generator).to(dtype)
    loss = (model(x) - y).pow(2).mean()
    loss.backward()


@pytest.fixture
def backward() -> Callable[[nn.Module, int], None]:
    """The :func:`backward_on` helper, for tests that drive their own training loop."""
    return backward_on
