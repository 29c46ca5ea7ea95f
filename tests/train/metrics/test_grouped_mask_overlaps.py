"""A batch's mask overlaps scored in padded groups of images: each image's own, bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from lucid_yolo.train.metrics import MetricsInputError, mask_overlaps
from lucid_yolo.train.metrics import grouped_mask_overlaps as grouped
from lucid_yolo.train.metrics.grouped_mask_overlaps import grouped_mask_overlaps

D, G = 9, 6


def _batch(seed: int) -> tuple[list[tuple[Tensor, Tensor]], list[tuple[Tensor, Tensor]], Tensor]:
    """Three images of different sizes: some prediction rows and target columns each."""
    g = torch.Generator().manual_seed(seed)
    predictions, targets = [], []
    for rows, columns, height, width in [(3, 2, 15, 21), (0, 3, 9, 30), (4, 5, 24, 11)]:
        row_ids = torch.randperm(D, generator=g)[:rows].sort().values
        predictions.append((torch.rand(rows, height, width, generator=g) < 0.4, row_ids))
        masks = torch.rand(columns, height, width, generator=g) < 0.3
        targets.append((masks, torch.arange(columns)))
    crowd = torch.rand(3, G, generator=g) < 0.3
    return predictions, targets, crowd


def _per_image(
    predictions: list[tuple[Tensor, Tensor]], targets: list[tuple[Tensor, Tensor]], crowd: Tensor
) -> Tensor:
    expected = torch.full((3, D, G), -1.0, dtype=torch.float64)
    for i, ((p, rows), (t, columns)) in enumerate(zip(predictions, targets, strict=True)):
        values = mask_overlaps(p, t, crowd[i][columns])
        expected[i, rows[:, None], columns[None, :]] = values
    return expected


@pytest.mark.parametrize("budget", [1 << 28, 1, 3 * 4 * 24 * 21])
def test_grouped_overlaps_equal_each_image_alone(
    monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    # the whole batch in one group, every image alone (a budget below one image), and a split
    monkeypatch.setattr(grouped, "GROUP_BYTES", budget)
    predictions, targets, crowd = _batch(0)
    out = grouped_mask_overlaps((3, D, G), lambda i: predictions[i], lambda i: targets[i], crowd)
    assert out.shape == (3, D, G)
    assert out.dtype == torch.float64
    assert torch.equal(out, _per_image(predictions, targets, crowd))


def test_grouped_overlaps_counts_the_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    scored: list[int] = []
    score = grouped._score

    def counted(group: list[object], *rest: Tensor) -> None:
        scored.append(len(group))
        score(group, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(grouped, "_score", counted)
    predictions, targets, crowd = _batch(1)
    grouped_mask_overlaps((3, D, G), lambda i: predictions[i], lambda i: targets[i], crowd)
    assert scored == [3]
    monkeypatch.setattr(grouped, "GROUP_BYTES", 1)
    scored.clear()
    grouped_mask_overlaps((3, D, G), lambda i: predictions[i], lambda i: targets[i], crowd)
    assert scored == [1, 1, 1]


def test_grouped_overlaps_refuse_masks_of_different_sizes() -> None:
    predictions, targets, crowd = _batch(2)
    targets[1] = (targets[1][0][:, :, :-1], targets[1][1])
    with pytest.raises(MetricsInputError, match="resize both to the source image"):
        grouped_mask_overlaps((3, D, G), lambda i: predictions[i], lambda i: targets[i], crowd)


@pytest.mark.gpu
def test_grouped_overlaps_on_cuda_equal_the_cpu_per_image_path() -> None:
    predictions, targets, crowd = _batch(3)
    on_cuda = (
        [(p.cuda(), r.cuda()) for p, r in predictions],
        [(t.cuda(), c.cuda()) for t, c in targets],
    )
    out = grouped_mask_overlaps(
        (3, D, G), lambda i: on_cuda[0][i], lambda i: on_cuda[1][i], crowd.cuda()
    )
    assert torch.equal(out.cpu(), _per_image(predictions, targets, crowd))
