"""Padded Newton–Schulz stacks: the choice of stacks, exactness of padding, one gather each way."""

import random
from collections.abc import Callable

import pytest
import torch

from lucid_yolo.train.optim import OptimizerConfigError, orthogonalise
from lucid_yolo.train.optim.shape_buckets import ShapeBuckets, bucket_shapes, newton_schulz_flops

_SHAPES = [
    torch.Size(s)
    for s in [
        (8, 3, 3, 3),
        (16, 8, 3, 3),
        (16, 16, 1, 1),
        (16, 16, 1, 1),
        (16, 1, 3, 3),
        (64, 16, 1, 1),
        (10, 64),
        (32, 32),
        (48, 5),
    ]
]
"""Wide, tall (depthwise 16×9, 64×16, 48×5), square and repeated conv and linear weights."""


def _buckets(dtype: torch.dtype, ratio: float = 4.0) -> ShapeBuckets:
    return ShapeBuckets([torch.empty(s, dtype=dtype) for s in _SHAPES], max_flop_ratio=ratio)


def _updates(dtype: torch.dtype) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=generator).to(dtype) for s in _SHAPES]


def _unpadded(u: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``s · NS(u)`` of one matrix alone, the per-shape computation padding must reproduce."""
    rows, cols = u.shape[0], u.numel() // u.shape[0]
    scale = max(1.0, rows / cols) ** 0.5
    return (orthogonalise(u.reshape(1, rows, cols), dtype=dtype)[0] * scale).reshape(u.shape)


def test_bucket_shapes_ratio_one_stacks_only_equal_shapes() -> None:
    shapes = [(9, 16), (16, 64), (9, 16), (8, 27)]
    assert bucket_shapes(shapes, 1.0) == shapes


def test_bucket_shapes_stays_within_the_flop_budget() -> None:
    rng = random.Random(0)
    shapes = [(rng.randint(1, 64), rng.randint(64, 600)) for _ in range(40)]
    for ratio in (1.5, 2.0, 3.0):
        stacks = bucket_shapes(shapes, ratio)
        assert all(r <= R and c <= C for (r, c), (R, C) in zip(shapes, stacks, strict=True))
        padded = sum(newton_schulz_flops(R, C) for R, C in stacks)
        assert padded <= ratio * sum(newton_schulz_flops(r, c) for r, c in shapes)
        assert len(set(stacks)) < len(set(shapes))


def test_bucket_shapes_wider_budget_gives_fewer_stacks() -> None:
    rng = random.Random(1)
    shapes = [(rng.randint(1, 128), rng.randint(128, 1200)) for _ in range(40)]
    counts = [len(set(bucket_shapes(shapes, ratio))) for ratio in (1.0, 2.0, 4.0, 1e9)]
    assert counts == sorted(counts, reverse=True)
    assert counts[-1] == 1


def test_shape_buckets_equal_unpadded_orthogonalisation_in_float64() -> None:
    buckets = _buckets(torch.float64)
    updates = _updates(torch.float64)
    results = buckets.orthogonalise(updates, steps=5, dtype=torch.float64)
    assert len(buckets.stack_shapes) < len(set(_SHAPES))
    for u, result in zip(updates, results, strict=True):
        torch.testing.assert_close(result, _unpadded(u, torch.float64), rtol=0.0, atol=1e-12)


def test_shape_buckets_stacks_keep_padding_exactly_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lucid_yolo.train.optim import shape_buckets as module

    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    original: Callable[..., torch.Tensor] = module.orthogonalise

    def spy(G: torch.Tensor, **kwargs: object) -> torch.Tensor:
        out = original(G, **kwargs)
        seen.append((G, out))
        return out

    monkeypatch.setattr(module, "orthogonalise", spy)
    _buckets(torch.float32).orthogonalise(_updates(torch.float32), steps=5, dtype=torch.float32)
    # Gaussian updates have no exact zero: the zeros a stack enters with are its padding
    paddings = [G == 0 for G, _ in seen]
    assert sum(int(padding.sum()) for padding in paddings) > 0
    for (_, out), padding in zip(seen, paddings, strict=True):
        assert not out[padding].any()


def test_shape_buckets_results_are_contiguous_slices_of_one_tensor() -> None:
    results = _buckets(torch.float32).orthogonalise(
        _updates(torch.float32), steps=5, dtype=torch.float32
    )
    assert [r.shape for r in results] == _SHAPES
    assert all(r.is_contiguous() for r in results)
    assert len({r.untyped_storage().data_ptr() for r in results}) == 1


def test_shape_buckets_zero_update_gives_zero_result() -> None:
    buckets = _buckets(torch.float32)
    updates = _updates(torch.float32)
    updates[3] = buckets.zeros_like(3)
    results = buckets.orthogonalise(updates, steps=5, dtype=torch.float32)
    assert torch.equal(results[3], torch.zeros(_SHAPES[3]))
    assert results[2].abs().sum() > 0


def test_shape_buckets_dispatch_one_gather_each_way_and_one_chain_per_stack(
    record_ops: Callable[[Callable[[], object]], list[str]],
    host_sync_ops: frozenset[str],
) -> None:
    buckets = _buckets(torch.float32)
    updates = _updates(torch.float32)
    ops = record_ops(lambda: buckets.orthogonalise(updates, steps=5, dtype=torch.float32))
    stacks = len(buckets.stack_shapes)
    assert ops.count("index_select") == 2
    assert ops.count("cat") == 2
    # five iterations of X·Xᵀ, then b·A + c·A² and a·X + P·X with their scalings fused
    assert ops.count("bmm") == 5 * stacks
    assert ops.count("baddbmm") == 5 * 2 * stacks
    assert not host_sync_ops & set(ops)


def test_shape_buckets_read_and_write_channels_last_matrices_in_their_layout(
    record_ops: Callable[[Callable[[], object]], list[str]],
) -> None:
    def channels_last(t: torch.Tensor) -> torch.Tensor:
        return t.to(memory_format=torch.channels_last) if t.ndim == 4 else t

    updates = _updates(torch.float64)
    expected = _buckets(torch.float64).orthogonalise(updates, steps=5, dtype=torch.float64)
    buckets = ShapeBuckets(
        [channels_last(torch.empty(s, dtype=torch.float64)) for s in _SHAPES], max_flop_ratio=4.0
    )
    strided = [channels_last(u) for u in updates]
    ops: list[str] = []
    results: list[torch.Tensor] = []
    ops += record_ops(
        lambda: results.extend(buckets.orthogonalise(strided, steps=5, dtype=torch.float64))
    )
    assert [r.stride() for r in results] == [u.stride() for u in strided]
    assert any(not u.is_contiguous() for u in strided)
    assert not {"clone", "copy_"} & set(ops)  # every channels-last update was read as a view
    for result, reference in zip(results, expected, strict=True):
        torch.testing.assert_close(result, reference, rtol=0.0, atol=1e-12)


def test_shape_buckets_read_an_update_of_another_layout_correctly() -> None:
    buckets = _buckets(torch.float64)
    updates = _updates(torch.float64)
    expected = buckets.orthogonalise(updates, steps=5, dtype=torch.float64)
    updates[1] = updates[1].to(memory_format=torch.channels_last)
    results = buckets.orthogonalise(updates, steps=5, dtype=torch.float64)
    assert torch.equal(results[1], expected[1])
    assert results[1].is_contiguous()


def test_shape_buckets_read_a_matrix_parameter_that_is_not_dense_row_major() -> None:
    wide = torch.randn(8, 20, dtype=torch.float64)
    every_other = wide[:, ::2]  # (8, 10) with strides (20, 2): not dense
    buckets = ShapeBuckets([every_other], max_flop_ratio=2.0)
    (result,) = buckets.orthogonalise([every_other], steps=5, dtype=torch.float64)
    assert result.is_contiguous()
    torch.testing.assert_close(result, _unpadded(every_other, torch.float64), rtol=0.0, atol=1e-12)


def test_shape_buckets_reject_an_empty_list() -> None:
    with pytest.raises(OptimizerConfigError, match="at least one matrix, got none"):
        ShapeBuckets([], max_flop_ratio=2.0)


def test_shape_buckets_reject_matrices_of_two_dtypes() -> None:
    matrices = [torch.empty(4, 8), torch.empty(4, 8, dtype=torch.float64)]
    with pytest.raises(OptimizerConfigError, match=r"one dtype and device, got .*float64"):
        ShapeBuckets(matrices, max_flop_ratio=2.0)
