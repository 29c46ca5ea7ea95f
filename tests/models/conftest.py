"""Shared fixtures of the model tests: small inputs so the CPU suite stays fast."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def images() -> torch.Tensor:
    """(2, 3, 64, 64) float images in [0, 1], fixed by a private generator."""
    generator = torch.Generator().manual_seed(0)
    return torch.rand(2, 3, 64, 64, generator=generator)
