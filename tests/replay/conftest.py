"""Shared settings of the replay tests: helper import path, deterministic kernels."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

# The test modules share nets through replay_nets.py; --import-mode=importlib does not put test
# directories on sys.path, so this conftest does it for its own directory.
sys.path.insert(0, str(Path(__file__).parent))


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
