"""Mask assembly: masks resampled onto another pixel grid (the source image of a letterbox)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from lucid_yolo.models.decode import assemble_masks, box_region, resample_grid, resample_masks
from lucid_yolo.models.exceptions import ModelError


def _inputs(n: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    coef = torch.randn(n, 8, generator=generator)
    protos = torch.randn(8, 24, 32, generator=generator)
    return coef, protos


def test_resample_masks_on_the_input_grid_equals_assemble_masks() -> None:
    coef, protos = _inputs()
    boxes = torch.tensor([[3.0, 5.0, 120.0, 90.0]]).repeat(5, 1)
    expected = assemble_masks(coef, protos, boxes, (96, 128))
    assert torch.equal(resample_masks(coef, protos, boxes, (96, 128)), expected)


def test_resample_masks_crops_the_padding_at_the_prototype_pixel_centres() -> None:
    coef, protos = _inputs()
    # input px = source px * 4 + (8, 4): each source pixel centre is a prototype pixel centre,
    # shifted by the padding (2 prototype columns, 1 row), so sampling there is exact
    size = (20, 28)
    boxes = torch.tensor([[0.0, 0.0, 28.0, 20.0]]).repeat(5, 1)
    out = resample_masks(coef, protos, boxes, size, scale=4.0, pad=(8.0, 4.0))
    logits = (coef @ protos.reshape(8, -1)).reshape(5, 24, 32)
    assert torch.equal(out, logits[:, 1:21, 2:30] > 0)


def test_resample_masks_is_chunk_size_independent() -> None:
    coef, protos = _inputs(7)
    boxes = torch.tensor([[10.0, 4.0, 60.0, 50.0]]).repeat(7, 1)
    whole = resample_masks(coef, protos, boxes, (70, 90), scale=1.3, pad=(2.0, 3.0))
    chunked = resample_masks(
        coef, protos, boxes, (70, 90), scale=1.3, pad=(2.0, 3.0), max_values=70 * 90
    )
    assert torch.equal(whole, chunked)


def test_resample_masks_clears_everything_outside_the_box() -> None:
    coef = torch.ones(1, 1)
    protos = torch.ones(1, 8, 8)
    boxes = torch.tensor([[2.0, 3.0, 7.0, 9.0]])
    out = resample_masks(coef, protos, boxes, (16, 16), scale=2.0)
    assert torch.equal(out, box_region(boxes, 16, 16))
    assert out.sum().item() == 5 * 6


def test_resample_masks_of_no_instance_is_empty() -> None:
    coef, protos = _inputs(0)
    out = resample_masks(coef, protos, torch.zeros(0, 4), (10, 12))
    assert out.shape == (0, 10, 12)
    assert out.dtype == torch.bool


def test_resample_masks_after_inference_mode_still_runs_with_gradients() -> None:
    # the sampling tables are kept across calls; one built under inference mode (validation)
    # must not turn into an inference tensor that a later call with gradients cannot save
    protos = torch.randn(3, 6, 7)
    boxes = torch.tensor([[1.0, 2.0, 20.0, 18.0]])
    with torch.inference_mode():
        first = resample_masks(
            torch.randn(1, 3), protos, boxes, (21, 25), scale=1.1, pad=(0.5, 0.25)
        )
    coef = torch.randn(1, 3, requires_grad=True)
    again = resample_masks(coef, protos, boxes, (21, 25), scale=1.1, pad=(0.5, 0.25))
    assert first.shape == again.shape == (1, 21, 25)


@pytest.mark.gpu
def test_resample_masks_on_cuda_hold_one_chunk_of_logits_beside_the_masks() -> None:
    # a validation pass's masks sit beside a replayed fit's graph pool: the result, one chunk's
    # float logits and its intermediate product, and no boolean temporaries of the chunk
    g = torch.Generator().manual_seed(3)
    n, height, width, h, w = 120, 480, 640, 160, 160
    coef = torch.randn(n, 32, generator=g).cuda()
    protos = torch.randn(32, h, w, generator=g).cuda()
    boxes = torch.tensor([[40.0, 30.0, 600.0, 450.0]]).repeat(n, 1).cuda()
    args = (coef, protos, boxes, (height, width))
    whole = resample_masks(*args, scale=1.0, pad=(0.0, 80.0), max_values=n * height * width)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    chunked = resample_masks(*args, scale=1.0, pad=(0.0, 80.0))
    held = torch.cuda.max_memory_allocated() - before
    chunk = (1 << 24) // (height * width)
    assert chunk < n, "a test of nothing: one chunk"
    result = n * height * width
    logits, product, combined = (
        4 * chunk * height * width,
        4 * chunk * height * w,
        4 * chunk * h * w,
    )
    assert held < result + logits + product + combined + (1 << 20)
    assert torch.equal(chunked, whole)


def test_resample_grid_keeps_each_axis_table_and_is_what_the_masks_are_sampled_with() -> None:
    coef, protos = _inputs()
    boxes = torch.tensor([[10.0, 4.0, 60.0, 50.0]]).repeat(5, 1)
    grid = resample_grid((70, 90), protos, scale=1.3, pad=(2.0, 3.0))
    taller = resample_grid((80, 90), protos, scale=1.3, pad=(2.0, 3.0))
    # the width's table kept for another height (the same storage), the height's made anew
    assert taller.cols_t.data_ptr() == grid.cols_t.data_ptr()
    assert taller.rows.data_ptr() != grid.rows.data_ptr()
    args = (coef, protos, boxes, (70, 90))
    found = resample_masks(*args, scale=1.3, pad=(2.0, 3.0))
    assert found.any(), "a test of nothing: empty masks"
    assert torch.equal(resample_masks(*args, scale=1.3, pad=(2.0, 3.0), grid=grid), found)
    blank = replace(grid, rows=torch.zeros_like(grid.rows))  # logits 0 everywhere: no pixel > 0
    assert not resample_masks(*args, scale=1.3, pad=(2.0, 3.0), grid=blank).any()


@pytest.mark.parametrize(
    ("size", "scale", "pad"), [((70, 91), 1.3, (2.0, 3.0)), ((70, 90), 1.2, (2.0, 3.0))]
)
def test_resample_masks_rejects_a_grid_made_for_other_arguments(
    size: tuple[int, int], scale: float, pad: tuple[float, float]
) -> None:
    coef, protos = _inputs()
    boxes = torch.tensor([[10.0, 4.0, 60.0, 50.0]]).repeat(5, 1)
    grid = resample_grid((70, 90), protos, scale=1.3, pad=(2.0, 3.0))
    with pytest.raises(ModelError, match="the resampling grid was made for"):
        resample_masks(coef, protos, boxes, size, scale=scale, pad=pad, grid=grid)
