"""Batched Newton–Schulz orthogonalisation, the core of the Muon update.

Muon replaces a matrix update ``G = U S Vᵀ`` by (approximately) its orthogonal factor ``U Vᵀ``:
every direction in the row and column spaces then moves by the same amount, whatever the gradient's
spectrum. Computing ``U Vᵀ`` by SVD is slow and not capturable, so Muon runs a few steps of an
odd-polynomial iteration ``X ← a·X + (b·A + c·A²)·X`` with ``A = X·Xᵀ``. The quintic coefficients
``(3.4445, −4.7750, 2.0315)`` published with Muon (K. Jordan et al., 2024, "Muon: An optimizer for
hidden layers in neural networks") are tuned for speed rather than convergence: after 5 steps the
singular values land in a band around 1 (about ``[0.68, 1.14]`` for Gaussian matrices, measured in
docs/engineering/musgd-ema.md) instead of exactly 1, which is what the optimiser needs.

The iteration only uses matmuls and elementwise ops on tensors of fixed shape, so it has no host
sync and can be recorded in a CUDA graph. Each step is three batched products with the scalings
fused into them (``baddbmm``: ``b·A + c·A²`` and ``a·X + P·X`` each round once, in the product's
epilogue), because on a GPU these tiny matrices cost what their kernel launches cost. It is
written for a stack of equal-shape matrices; MuSGD zero-pads matrices of several shapes into a
few such stacks (:mod:`.shape_buckets`), so one launch per product serves many conv weights.
"""

from typing import Literal

import torch
from torch import Tensor

from lucid_yolo.train.optim.errors import OptimizerConfigError

__all__ = [
    "NEWTON_SCHULZ_DTYPES",
    "NS_COEFFICIENTS",
    "NewtonSchulzChoice",
    "NewtonSchulzDtype",
    "orthogonalise",
]

NewtonSchulzDtype = Literal["float32", "bfloat16"]
"""A configuration's name for the iteration's compute dtype."""

NewtonSchulzChoice = Literal["auto", NewtonSchulzDtype]
"""``YoloModule.newton_schulz_dtype``: a :data:`NewtonSchulzDtype`, or ``auto`` for MuSGD's
choice by the matrices' device (``musgd.NS_DTYPES``)."""

NEWTON_SCHULZ_DTYPES: dict[NewtonSchulzDtype, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
}
"""The compute dtypes a configuration can name, and what each is."""

NS_COEFFICIENTS: tuple[float, float, float] = (3.4445, -4.7750, 2.0315)
"""Quintic Newton–Schulz coefficients ``(a, b, c)`` published with Muon."""

_NORM_EPS = 1e-7
"""Added to the Frobenius norm so an all-zero update maps to zero instead of NaN."""


def orthogonalise(G: Tensor, *, steps: int = 5, dtype: torch.dtype = torch.float32) -> Tensor:
    """Approximate the orthogonal factor ``U Vᵀ`` of each matrix in a batch.

    Each matrix is first divided by its Frobenius norm, which bounds every singular value by 1 (the
    iteration's basin). Tall matrices are transposed so that ``A = X·Xᵀ`` is the smaller Gram
    matrix; the result is transposed back.

    Args:
        G: ``(B, rows, cols)`` stack of matrices, any floating dtype. The norm is taken on ``G``
            itself (before any transpose) so that a batched call and a per-matrix call reduce the
            same memory in the same order.
        steps: Newton–Schulz iterations; 5 with the published coefficients.
        dtype: compute dtype of the iteration. ``torch.float32`` (MuSGD's off CUDA) is exact
            enough for conv-sized matrices and bitwise reproducible on CPU; ``torch.bfloat16``
            (MuSGD's on CUDA) is faster on tensor cores and is what the Muon authors use for
            large language models.

    Returns:
        ``(B, rows, cols)`` tensor in ``dtype`` whose singular values lie near 1 (zero matrices stay
        zero). Its Frobenius norm is about ``sqrt(min(rows, cols))``.

    Raises:
        OptimizerConfigError: when ``G`` is not 3-D or ``steps`` is negative.
    """
    if G.ndim != 3:
        raise OptimizerConfigError(
            f"orthogonalise expects a (B, rows, cols) stack, got shape {tuple(G.shape)!r}; "
            "stack 2-D matrices with torch.stack first"
        )
    if steps < 0:
        raise OptimizerConfigError(f"steps must be >= 0, got {steps!r}")
    a, b, c = NS_COEFFICIENTS
    X: Tensor = G.to(dtype)
    X = X / (torch.linalg.vector_norm(X, dim=(-2, -1), keepdim=True) + _NORM_EPS)
    tall = G.shape[-2] > G.shape[-1]
    if tall:
        X = X.mT
    for _ in range(steps):
        A = X @ X.mT  # (B, r, r) with r = min(rows, cols)
        P = torch.baddbmm(A, A, A, beta=b, alpha=c)  # b·A + c·A², one kernel
        X = torch.baddbmm(X, P, X, beta=a)  # a·X + P·X, one kernel
    return X.mT if tall else X
