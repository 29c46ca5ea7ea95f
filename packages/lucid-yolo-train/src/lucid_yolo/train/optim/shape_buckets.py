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
``max_flop_ratio`` times the unpadded FLOPs. With 2.0 (MuSGD's default on CUDA) the yolo26n-class
models land in 6 or 7 stacks at 1.7–1.9× the unpadded FLOPs (the session-7 table in the
engineering log), a negligible amount of work on a GPU and about twice the seconds on a CPU,
where MuSGD therefore stacks only equal shapes (``PADDED_FLOP_RATIOS``).

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


def _row_major_strides(shape: torch.Size) -> tuple[int, ...]:
    strides = [1] * len(shape)
    for dim in range(len(shape) - 2, -1, -1):
        strides[dim] = strides[dim + 1] * shape[dim + 1]
    return tuple(strides)


def _dense_strides(t: Tensor) -> tuple[int, ...]:
    """``t``'s strides when they lay its entries out densely without overlap, else row-major ones.

    Dense strides (contiguous, channels-last, any permutation) map the entries one-to-one onto
    ``numel`` consecutive elements, so a flat slice of that length can be viewed with them.
    """
    shape, strides = t.shape, t.stride()
    expected = 1
    for dim in sorted((d for d in range(t.ndim) if shape[d] != 1), key=lambda d: strides[d]):
        if strides[dim] != expected:
            return _row_major_strides(shape)
        expected *= shape[dim]
    return tuple(strides)


class ShapeBuckets:
    """Orthogonalise a fixed list of matrices in a few zero-padded stacks, with fixed indices.

    Everything a step needs is made here, on the matrices' device: the gather indices and the
    per-matrix shape factors ``s = max(1, rows/cols)^0.5`` (a ``(B, 1, 1)`` tensor per stack),
    so :meth:`orthogonalise` allocates only its results and has no host sync and no branch on
    values: it is recorded as is in a CUDA graph.

    The matrices are read and written in their parameters' memory order (a channels-last conv
    weight is read without a copy and its result has the parameter's strides), so the foreach
    ops that blend the result with the SGD direction and the parameter keep their fast path,
    which needs equal strides across their lists.

    Args:
        matrices: the parameters (``(out, in, k, k)``, ``(out, in)``, …), each viewed as
            ``(shape[0], numel // shape[0])``; at least one, all of one dtype and device. Their
            shapes, strides, dtype and device are what :meth:`orthogonalise` expects.
        max_flop_ratio: see :func:`bucket_shapes`.

    Raises:
        OptimizerConfigError: for no matrix, or matrices of several dtypes or devices.
    """

    def __init__(self, matrices: Sequence[Tensor], *, max_flop_ratio: float) -> None:
        if not matrices:
            raise OptimizerConfigError("ShapeBuckets needs at least one matrix, got none")
        kinds = {(m.dtype, m.device) for m in matrices}
        if len(kinds) != 1:
            raise OptimizerConfigError(
                f"ShapeBuckets needs matrices of one dtype and device, got "
                f"{sorted(map(str, kinds))!r}; make one ShapeBuckets per dtype and device"
            )
        ((dtype, device),) = kinds
        self.shapes = [m.shape for m in matrices]
        self._numels = [s.numel() for s in self.shapes]
        self.dtype = dtype
        self.device = device
        self._strides = [_dense_strides(m) for m in matrices]
        self._row_major = [
            strides == _row_major_strides(s)
            for strides, s in zip(self._strides, self.shapes, strict=True)
        ]
        """Row-major matrices are flattened and shaped with ``view``, the others with
        ``as_strided`` (both views; ``view`` is the cheaper call)."""
        matrices_2d = [(s[0], s.numel() // s[0]) for s in self.shapes]
        wide = [(min(r, c), max(r, c)) for r, c in matrices_2d]
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
                rows, cols = matrices_2d[index]
                shape = self.shapes[index]
                # the logical (row-major) index of each entry, listed in memory order
                logical = torch.empty(shape.numel(), dtype=torch.int64)
                logical.as_strided(shape, self._strides[index]).copy_(
                    torch.arange(shape.numel()).view(shape)
                )
                row, col = logical // cols, logical % cols
                # entry (row, col) of the matrix lands at (row, col) of its slot, or at
                # (col, row) when the matrix is tall and enters transposed
                inside = row * stack_cols + col if rows <= cols else col * stack_cols + row
                padded_position[index] = offset + slot * stack_rows * stack_cols + inside
            scales.append(
                torch.tensor(
                    [max(1.0, matrices_2d[i][0] / matrices_2d[i][1]) ** 0.5 for i in members],
                    dtype=torch.float64,
                ).view(-1, 1, 1)  # (count, 1, 1)
            )
            self._stacks.append(stack)
            offset += stack.numel
        unpack = torch.cat(padded_position)  # (N,) padded position of each entry, memory order
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
        return self._shaped(self._zeros[: self._numels[index]], index)

    def _shaped(self, flat: Tensor, index: int) -> Tensor:
        """View ``flat``, in matrix ``index``'s memory order, with its shape and strides."""
        if self._row_major[index]:
            return flat.view(self.shapes[index])
        return flat.as_strided(self.shapes[index], self._strides[index])

    def _flat(self, update: Tensor, index: int) -> Tensor:
        """``update``'s entries in matrix ``index``'s memory order; a view when strides match."""
        strides = self._strides[index]
        if update.stride() != strides:  # another layout: copied into the expected one
            update = torch.empty_strided(
                update.shape, strides, dtype=update.dtype, device=update.device
            ).copy_(update)
        if self._row_major[index]:
            return update.view(-1)
        return update.as_strided((self._numels[index],), (1,))

    def orthogonalise(
        self, updates: Sequence[Tensor], *, steps: int, dtype: torch.dtype
    ) -> list[Tensor]:
        """``s · NS(u)`` for every matrix update ``u``, in its own shape and the input dtype.

        Args:
            updates: one tensor per matrix given at construction, in that order, each of its
                shape, dtype and device (use :meth:`zeros_like` for a matrix without an update).
                Another memory layout is read correctly, with a copy.
            steps: Newton–Schulz iterations.
            dtype: compute dtype of the iteration.

        Returns:
            Views of one flat tensor, one per update, each with its matrix's shape and strides.
        """
        # pack: (N + 1,) entries, the last one zero, gathered into every stack at once
        in_memory_order = [self._flat(u, index) for index, u in enumerate(updates)]
        entries = torch.cat([*in_memory_order, self._zeros[:1]])
        padded = entries.to(dtype).index_select(0, self._pack_index)  # (Σ B·R·C,)
        results = []
        for stack, scale in zip(self._stacks, self._scales, strict=True):
            X = padded[stack.offset : stack.offset + stack.numel]
            X = X.view(stack.count, stack.rows, stack.cols)  # (B, R, C), R <= C: no transpose
            results.append(orthogonalise(X, steps=steps, dtype=dtype).to(self.dtype) * scale)
        # unpack: every stack's corners back to the matrices' memory order, one slice each
        flat = torch.cat([r.reshape(-1) for r in results]).index_select(0, self._unpack_index)
        pieces = flat.split_with_sizes(self._numels)
        return [self._shaped(piece, index) for index, piece in enumerate(pieces)]
