"""The mask-overlap probe: its three variants give the per-image overlaps bit for bit (CPU)."""

from __future__ import annotations

from argparse import Namespace
from types import ModuleType

import pytest
import torch
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = load_tool("probe_mask_overlaps", monkeypatch)
    monkeypatch.setattr(module, "SIZES", [(12, 17), (17, 12), (9, 9)])
    return module


def test_probe_variants_equal_the_per_image_overlaps(tool: ModuleType) -> None:
    # ragged rows and targets an image, so that the groups pad rows, columns and pixels
    batch = tool.make_batch(40, 3, 300, "cpu", seed=40)
    assert [(p.shape[0], t.shape[0]) for p, _, t in batch] == [(40, 3), (20, 2), (13, 1)]
    results = tool.measure(Namespace(rows=[3, 40], targets=3, rounds=1, device="cpu"))
    assert [(r["rows_per_image"], r["variant"]) for r in results] == [
        (rows, name) for rows in (3, 40) for name in ("per-image", "grouped-bmm", "grouped-mm")
    ]
    assert all(r["same_bits"] for r in results)


def test_probe_grouped_mm_keeps_each_images_own_block(tool: ModuleType) -> None:
    # the single product computes every cross-image block too; keeping any block but each
    # image's own would change the values (not vacuous: some overlaps are positive)
    batch = tool.make_batch(4, 3, 10, "cpu", seed=0)
    crowd = torch.zeros(3, 3, dtype=torch.bool)
    expected = tool.per_image(batch, crowd, (3, 10, 3))
    assert torch.equal(tool.grouped(batch, crowd, (3, 10, 3), "mm"), expected)
    assert (expected > 0).any()
