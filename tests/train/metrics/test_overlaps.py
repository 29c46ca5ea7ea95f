"""Box and mask overlaps, including COCO's crowd rule."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.train.metrics import box_overlaps, mask_overlaps
from lucid_yolo.train.metrics import overlaps as overlaps_module


def test_box_overlaps_hand_value() -> None:
    pred = torch.tensor([[0.0, 0.0, 4.0, 4.0]])
    target = torch.tensor([[2.0, 0.0, 6.0, 4.0], [10.0, 10.0, 12.0, 12.0]])
    out = box_overlaps(pred, target, torch.tensor([False, False]))
    assert out.dtype == torch.float64
    assert out.tolist() == [[pytest.approx(8 / 24), 0.0]]


def test_box_overlaps_crowd_divides_by_prediction_area() -> None:
    pred = torch.tensor([[0.0, 0.0, 4.0, 4.0]])
    crowd = torch.tensor([[2.0, 0.0, 100.0, 100.0]])
    assert box_overlaps(pred, crowd, torch.tensor([True])).item() == pytest.approx(0.5)


def test_box_overlaps_degenerate_boxes_give_zero_not_nan() -> None:
    point = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    out = box_overlaps(point, point, torch.tensor([False]))
    assert out.item() == 0.0


def test_mask_overlaps_hand_value() -> None:
    pred = torch.zeros(1, 4, 4, dtype=torch.bool)
    pred[0, :2, :] = True  # 8 pixels
    target = torch.zeros(2, 4, 4, dtype=torch.bool)
    target[0, :, :2] = True  # 8 pixels, 4 shared
    out = mask_overlaps(pred, target, torch.tensor([False, False]))
    assert out.tolist() == [[pytest.approx(4 / 12), 0.0]]


def test_mask_overlaps_crowd_divides_by_prediction_area() -> None:
    pred = torch.zeros(1, 4, 4, dtype=torch.bool)
    pred[0, :2, :] = True
    target = torch.ones(1, 4, 4, dtype=torch.bool)
    target[0, 0, :2] = False  # covers 6 of the 8 predicted pixels
    assert mask_overlaps(pred, target, torch.tensor([True])).item() == pytest.approx(6 / 8)


@pytest.mark.parametrize(("n", "m"), [(3, 0), (0, 2), (3, 2)])
def test_mask_overlaps_without_an_intersection_are_zeros(n: int, m: int) -> None:
    pred = torch.ones(n, 4, 4, dtype=torch.bool)
    target = torch.zeros(m, 4, 4, dtype=torch.bool)  # no target pixel at all
    out = mask_overlaps(pred, target, torch.tensor([True, False])[:m])
    assert out.dtype == torch.float64
    assert out.shape == (n, m)
    assert not out.any()


def test_mask_overlaps_of_rectangles_equal_box_overlaps() -> None:
    boxes = torch.tensor([[1, 2, 9, 7], [3, 1, 8, 8], [0, 0, 4, 4]])
    masks = torch.zeros(3, 10, 10, dtype=torch.bool)
    for i, (x0, y0, x1, y1) in enumerate(boxes.tolist()):
        masks[i, y0:y1, x0:x1] = True
    crowd = torch.tensor([False, True, False])
    expected = box_overlaps(boxes.double(), boxes.double(), crowd)
    assert torch.allclose(mask_overlaps(masks, masks, crowd), expected, atol=1e-15)


def _large_masks() -> tuple[torch.Tensor, torch.Tensor]:
    """Masks of over 256 pixels, whose intersection counts bf16 cannot hold exactly."""
    pred = torch.zeros(2, 80, 80, dtype=torch.bool)
    target = torch.zeros(1, 80, 80, dtype=torch.bool)
    pred[0, 3:70, 5:66] = True
    pred[1, 10:79, 0:41] = True
    target[0, 0:61, 1:73] = True
    return pred, target


def test_mask_overlaps_counts_exactly_under_a_bf16_autocast() -> None:
    pred, target = _large_masks()
    crowd = torch.zeros(1, dtype=torch.bool)
    plain = mask_overlaps(pred, target, crowd)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = mask_overlaps(pred, target, crowd)
    assert torch.equal(autocast, plain)
    assert plain[0, 0].item() == (58 * 61) / (67 * 61 + 61 * 72 - 58 * 61)


@pytest.mark.gpu
def test_mask_overlaps_on_cuda_equal_the_cpu_window() -> None:
    pred, target = _large_masks()
    crowd = torch.tensor([True])
    assert torch.equal(
        mask_overlaps(pred.cuda(), target.cuda(), crowd).cpu(), mask_overlaps(pred, target, crowd)
    )


@pytest.mark.gpu
@pytest.mark.parametrize("chunk_values", [1, 2 * 80 * 80, 2**24])
def test_mask_counts_on_cuda_in_chunks_equal_numpys(
    chunk_values: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = torch.Generator().manual_seed(5)
    masks = torch.rand(5, 80, 80, generator=g) > 0.4
    monkeypatch.setattr(overlaps_module, "_CHUNK_VALUES", chunk_values)
    on_device = masks.cuda()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    counts = overlaps_module._count(on_device)
    held = torch.cuda.max_memory_allocated() - before
    assert counts.dtype == torch.float64
    assert torch.equal(counts.cpu(), overlaps_module._count(masks))
    if chunk_values < 5 * 80 * 80:  # never a float64 copy of all five masks at once
        assert held < 5 * 80 * 80 * 8


def test_box_overlaps_of_a_batch_equal_each_image_bitwise() -> None:
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(3, 7, 2, generator=g) * 50
    pred = torch.cat([xy, xy + 1 + torch.rand(3, 7, 2, generator=g) * 20], -1)
    target = pred[:, :4] + torch.randn(3, 4, 4, generator=g)
    crowd = torch.rand(3, 4, generator=g) < 0.3
    batched = box_overlaps(pred, target, crowd)
    for i in range(3):
        assert torch.equal(batched[i], box_overlaps(pred[i], target[i], crowd[i]))


@pytest.mark.parametrize("chunk_values", [1, 2 * 80 * 80, 3 * 80 * 80, 2**24])
def test_mask_overlaps_in_chunks_equal_float64_sums(
    chunk_values: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = torch.Generator().manual_seed(4)
    pred = torch.rand(5, 80, 80, generator=g) > 0.6
    target = torch.rand(3, 80, 80, generator=g) > 0.5
    target[0, 0, 0] = target[0, -1, -1] = True  # spanning the frame: the product counts too
    crowd = torch.tensor([False, True, False])
    monkeypatch.setattr(overlaps_module, "_CHUNK_VALUES", chunk_values)
    chunked = mask_overlaps(pred, target, crowd)
    p, t = pred.reshape(5, -1).double(), target.reshape(3, -1).double()
    inter, area_p, area_t = p @ t.T, p.sum(1), t.sum(1)
    union = area_p[:, None] + area_t[None, :] - inter
    assert torch.equal(chunked, inter / torch.where(crowd[None, :], area_p[:, None], union))
    assert (chunked > 0).all()
