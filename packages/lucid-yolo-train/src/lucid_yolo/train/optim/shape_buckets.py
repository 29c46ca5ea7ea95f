"""Matrices of many shapes orthogonalised in a few zero-padded stacks: fewer, larger kernels.

A YOLO26 model's conv weights come in about 40 distinct matrix shapes (yolo26n: 126 matrices,
40 shapes once tall ones are transposed). One batched Newton–Schulz call per shape is about 45
kernels, each tiny (the whole orthogonalisation of yolo26n is ~9.5 GFLOP), so a step's cost is
the number of kernels, not their work: launching them from Python in a native step, and the node
count of a replayed update graph (docs/engineering/musgd-ema.md, session 7).

Zero padding is exact in exact arithmetic. After the tall→wide transpose, a matrix ``(r, c)``
with ``r ≤ c`` placed in the top-left corner of a ``(R, C)`` block of zeros keeps the same
Frobenius norm; ``A = X·Xᵀ`` is zero outside its ``(r, r)`` corner, so are ``A²`` and
``b·A + c·A²``, and ``X ← a·X + (b·A + c·A²)·X`` leaves the padded rows and columns zero while
the corner follows the unpadded iteration. Cropping the corner gives the unpadded result; only
the rounding differs (a padded product may reduce in another order).

:func:`bucket_shapes` chooses the stacks: starting from one stack per shape, it merges the two
stacks whose merge adds the fewest padded FLOPs, as long as the total stays within
``max_flop_ratio`` times the unpadded FLOPs. With the default 2.0 the yolo26n-class models land in
6 or 7 stacks at 1.7–1.9× the unpadded FLOPs (the session-7 table in the engineering log), a
negligible amount of work on a GPU and twice the seconds on a CPU.

:class:`ShapeBuckets` packs and unpacks without a kernel per matrix: the matrices enter as one
``cat`` and one ``index_select`` (a gather index made at construction places every entry,
transposes tall matrices and points padded entries at a trailing zero), and leave as one ``cat``
and one ``index_select`` back into parameter order, from which each matrix is a contiguous view.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from lucid_yolo.train.optim.errors import OptimizerConfigError
from lucid_yolo.train.optim.newton_schulz import orthogonalise

__all__ = ["ShapeBuckets", "bucket_shapes", "newton_schulz_flops"]


def newton_schulz_flops(rows: int, cols: int, steps: int = 5) -> int:
    """FLOPs of ``steps`` Newton–Schulz iterations on one wide ``(rows, cols)`` matrix.

    Per iteration ``X·Xᵀ`` and ``P·X`` cost ``2·rows²·cols`` each and ``A·A`` ``2·rows³``.
    """
    return steps * (4 * rows * rows * cols + 2 * rows**3)


def bucket_shapes(
    shapes: Sequence[tuple[int, int]], max_flop_ratio: float
) -> list[tuple[int, int]]:
    """Assign each wide matrix shape a padded stack shape, merging greedily within a FLOP budget.

    Args:
        shapes: ``(r, c)`` with ``r <= c`` of every matrix (repeats count: they weigh the cost).
        max_flop_ratio: the padded FLOPs may be at most this multiple of the unpadded ones;
            1.0 stacks only equal shapes.

    Returns:
        The stack shape ``(R, C)`` of each input shape, in input order, with ``R >= r`` and
        ``C >= c``. Equal inputs always share a stack; the result depends only on the inputs.
    """
    counts: dict[tuple[int, int], int] = {}
    for shape in shapes:
        counts[shape] = counts.get(shape, 0) + 1
    # each stack: (R, C, matrices, member shapes); sorted so that ties break the same way always
    stacks = [(r, c, n, [(r, c)]) for (r, c), n in sorted(counts.items())]
    unpadded = sum(n * newton_schulz_flops(r, c) for r, c, n, _ in stacks)
    total = unpadded
    while len(stacks) > 1:
        best: tuple[int, int, int] | None = None
        for i, (r1, c1, n1, _) in enumerate(stacks):
            for j in range(i + 1, len(stacks)):
                r2, c2, n2, _ = stacks[j]
                merged = (n1 + n2) * newton_schulz_flops(max(r1, r2), max(c1, c2))
                extra = merged - n1 * newton_schulz_flops(r1, c1) - n2 * newton_schulz_flops(r2, c2)
                if best is None or extra < best[0]:
                    best = (extra, i, j)
        assert best is not None
        extra, i, j = best
        if total + extra > max_flop_ratio * unpadded:
            break
        total += extra
        (r1, c1, n1, members1), (r2, c2, n2, members2) = stacks[i], stacks[j]
        stacks = [s for k, s in enumerate(stacks) if k not in (i, j)]
        stacks.append((max(r1, r2), max(c1, c2), n1 + n2, members1 + members2))
    stack_of = {member: (r, c) for r, c, _, members in stacks for member in members}
    return [stack_of[shape] for shape in shapes]


@dataclass(frozen=True)
class _Stack:
    """One padded stack: ``count`` matrices of shape ``(rows, cols)`` from ``offset`` on."""

    count: int
    rows: int
    cols: int
    offset: int

    @property
    def numel(self) -> int:
        return self.count * self.rows * self.cols


class ShapeBuckets:
    """Orthogonalise a fixed list of matrices in a few zero-padded stacks, with fixed indices.

    Everything a step needs is made here, on the matrices' device: the gather indices and the
    per-matrix shape factors ``s = max(1, rows/cols)^0.5`` (a ``(B, 1, 1)`` tensor per stack),
    so :meth:`orthogonalise` allocates only its results and has no host sync and no branch on
    values: it is recorded as is in a CUDA graph.

    Args:
        shapes: parameter shapes (``(out, in, k, k)``, ``(out, in)``, …) of the matrices, each
            viewed as ``(shape[0], numel // shape[0])``; at least one.
        dtype: dtype of the matrices' updates (the parameters' dtype).
        device: their device.
        max_flop_ratio: see :func:`bucket_shapes`.
    """

    def __init__(
        self,
        shapes: Sequence[torch.Size],
        *,
        dtype: torch.dtype,
        device: torch.device,
        max_flop_ratio: float,
    ) -> None:
        if not shapes:
            raise OptimizerConfigError("ShapeBuckets needs at least one matrix shape, got none")
        self.shapes = [torch.Size(s) for s in shapes]
        self._numels = [s.numel() for s in self.shapes]
        self.dtype = dtype
        self.device = device
        matrices = [(s[0], s.numel() // s[0]) for s in self.shapes]
        wide = [(min(r, c), max(r, c)) for r, c in matrices]
        stack_shapes = bucket_shapes(wide, max_flop_ratio)
        slots: dict[tuple[int, int], list[int]] = {}
        for index, stack_shape in enumerate(stack_shapes):
            slots.setdefault(stack_shape, []).append(index)
        self._stacks: list[_Stack] = []
        scales: list[Tensor] = []
        offset = 0
        padded_position: list[Tensor] = [torch.empty(0, dtype=torch.int64)] * len(matrices)
        for (stack_rows, stack_cols), members in sorted(slots.items()):
            stack = _Stack(len(members), stack_rows, stack_cols, offset)
            for slot, index in enumerate(members):
                rows, cols = matrices[index]
                row = torch.arange(rows).unsqueeze(1)  # (rows, 1)
                col = torch.arange(cols).unsqueeze(0)  # (1, cols)
                # entry (row, col) of the matrix lands at (row, col) of its slot, or at
                # (col, row) when the matrix is tall and enters transposed
                inside = row * stack_cols + col if rows <= cols else col * stack_cols + row
                base = offset + slot * stack_rows * stack_cols
                padded_position[index] = (base + inside).reshape(-1)  # (rows·cols,)
            scales.append(
                torch.tensor(
                    [max(1.0, matrices[i][0] / matrices[i][1]) ** 0.5 for i in members],
                    dtype=torch.float64,
                ).view(-1, 1, 1)  # (count, 1, 1)
            )
            self._stacks.append(stack)
            offset += stack.numel
        unpack = torch.cat(padded_position)  # (N,) padded position of each entry, in input order
        entries = unpack.numel()
        index_dtype = torch.int32 if max(offset, entries) < 2**31 else torch.int64
        pack = torch.full((offset,), entries, dtype=torch.int64)  # padding reads the zero at N
        pack[unpack] = torch.arange(entries)
        self._pack_index = pack.to(device=device, dtype=index_dtype)
        self._unpack_index = unpack.to(device=device, dtype=index_dtype)
        self._scales = [s.to(device=device, dtype=dtype) for s in scales]
        self._zeros = torch.zeros(max(self._numels), dtype=dtype, device=device)
        """Stands in for a matrix without an update this step, and for the padding's source."""

    @property
    def stack_shapes(self) -> list[tuple[int, int, int]]:
        """``(B, R, C)`` of every padded stack, in the order they are orthogonalised."""
        return [(s.count, s.rows, s.cols) for s in self._stacks]

    def zeros_like(self, index: int) -> Tensor:
        """A zero update for matrix ``index`` (a view of a tensor made at construction)."""
        shape = self.shapes[index]
        return self._zeros[: shape.numel()].view(shape)

    def orthogonalise(
        self, updates: Sequence[Tensor], *, steps: int, dtype: torch.dtype
    ) -> list[Tensor]:
        """``s · NS(u)`` for every matrix update ``u``, in its own shape and the input dtype.

        Args:
            updates: one tensor per shape given at construction, in that order, each of that
                shape, dtype and device (use :meth:`zeros_like` for a matrix without an update).
            steps: Newton–Schulz iterations.
            dtype: compute dtype of the iteration.

        Returns:
            Contiguous views of one flat tensor, one per update, shaped like the updates.
        """
        # pack: (N + 1,) entries, the last one zero, gathered into every stack at once
        entries = torch.cat([u.reshape(-1) for u in updates] + [self._zeros[:1]])
        padded = entries.to(dtype).index_select(0, self._pack_index)  # (Σ B·R·C,)
        results = []
        for stack, scale in zip(self._stacks, self._scales, strict=True):
            X = padded[stack.offset : stack.offset + stack.numel]
            X = X.view(stack.count, stack.rows, stack.cols)  # (B, R, C), R <= C: no transpose
            results.append(orthogonalise(X, steps=steps, dtype=dtype).to(self.dtype) * scale)
        # unpack: every stack's corners back to input order, each update a contiguous slice
        flat = torch.cat([r.reshape(-1) for r in results]).index_select(0, self._unpack_index)
        pieces = flat.split_with_sizes(self._numels)
        return [piece.view(shape) for piece, shape in zip(pieces, self.shapes, strict=True)]
