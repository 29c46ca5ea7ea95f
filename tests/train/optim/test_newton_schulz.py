"""Newton–Schulz orthogonalisation: singular-value band, singular vectors, batching."""

import pytest
import torch

from lucid_yolo.train.optim import OptimizerConfigError, orthogonalise

_SHAPES = [(16, 27), (32, 16), (64, 576), (8, 8), (128, 64), (96, 864)]
"""Wide, tall, square and conv-sized (out × in·k·k) matrices."""


@pytest.mark.parametrize("shape", _SHAPES)
def test_orthogonalise_singular_values_in_band(shape: tuple[int, int]) -> None:
    G = torch.randn(3, *shape, generator=torch.Generator().manual_seed(0))
    singular_values = torch.linalg.svdvals(orthogonalise(G))
    assert singular_values.min() > 0.6
    assert singular_values.max() < 1.2


def test_orthogonalise_keeps_singular_vectors() -> None:
    G = torch.randn(1, 24, 40, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    U, _, Vh = torch.linalg.svd(G[0], full_matrices=False)
    core = U.T @ orthogonalise(G, dtype=torch.float64)[0] @ Vh.T  # (24, 24), diagonal if aligned
    off_diagonal = core - torch.diag(torch.diagonal(core))
    assert off_diagonal.abs().max() < 1e-8
    assert torch.diagonal(core).min() > 0.6


def test_orthogonalise_batched_equals_one_matrix_at_a_time() -> None:
    G = torch.randn(4, 48, 20, generator=torch.Generator().manual_seed(2))
    batched = orthogonalise(G)
    singles = torch.cat([orthogonalise(G[i : i + 1]) for i in range(4)])
    assert torch.equal(batched, singles)


def test_orthogonalise_zero_matrix_stays_zero() -> None:
    out = orthogonalise(torch.zeros(2, 5, 7))
    assert torch.equal(out, torch.zeros(2, 5, 7))


def test_orthogonalise_computes_in_requested_dtype() -> None:
    out = orthogonalise(torch.randn(1, 8, 16), dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16
    assert out.shape == (1, 8, 16)


def test_orthogonalise_rejects_unbatched_matrix() -> None:
    with pytest.raises(OptimizerConfigError, match=r"got shape \(8, 16\)"):
        orthogonalise(torch.randn(8, 16))


def test_orthogonalise_rejects_negative_steps() -> None:
    with pytest.raises(OptimizerConfigError, match="steps must be >= 0, got -1"):
        orthogonalise(torch.randn(1, 8, 16), steps=-1)
