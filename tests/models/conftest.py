"""Shared fixtures of the model tests: small inputs so the CPU suite stays fast."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def images() -> torch.Tensor:
    """(2, 3, 64, 64) float images in [0, 1], fixed by a private generator."""
    generator = torch.Generator().manual_seed(0)
    return torch.rand(2, 3, 64, 64, generator=generator)


def calibrate_batchnorm(model: torch.nn.Module) -> torch.nn.Module:
    """Set every BatchNorm's running statistics from one random batch, then switch to eval.

    A freshly initialised net in eval mode uses running stats (0, 1) that do not match its
    activations, whose scale then shrinks layer after layer to ~1e-9 at P5: every anchor scores
    alike and tests of eval-mode numerics would compare near-zeros. The batch is large enough
    (8 × 128², 128 values per channel at P5) for eval-mode activations to stay near unit scale.
    """
    images = torch.rand(8, 3, 128, 128, generator=torch.Generator().manual_seed(1))
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.momentum = 1.0
    model.train()
    with torch.no_grad():
        model(images)
    for m, momentum in zip(norms, momenta, strict=True):
        m.momentum = momentum
    model.eval()
    return model


@pytest.fixture
def calibrate() -> object:
    """:func:`calibrate_batchnorm`, as a fixture (test modules cannot import conftest)."""
    return calibrate_batchnorm
