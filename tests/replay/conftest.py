"""Shared settings of the replay tests: deterministic kernels."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def deterministic() -> Iterator[None]:
    """cuDNN deterministic, no benchmark, deterministic algorithms; restored afterwards."""
    saved = (
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        torch.are_deterministic_algorithms_enabled(),
    )
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)
    yield
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved[:2]
    torch.use_deterministic_algorithms(saved[2])
