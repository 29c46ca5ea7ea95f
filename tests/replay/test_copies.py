"""Grouped copies: the same bits as one ``copy_`` per tensor, one foreach call per dtype; a
recording's fresh static input."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from dispatched_ops import DispatchedOps

from lucid_yolo.replay._copies import copy_grouped, fresh_copy


def _mixed() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    sources = [
        torch.randn(5),
        torch.tensor(7, dtype=torch.int64),
        torch.randn(3, 2).to(torch.bfloat16),
        torch.tensor([-0.0, float("nan"), float("inf")]),
        torch.tensor(9, dtype=torch.int64),
    ]
    return [torch.empty_like(s) for s in sources], sources


def test_copy_grouped_writes_every_source_bitwise() -> None:
    destinations, sources = _mixed()
    copy_grouped(destinations, sources)
    for destination, source in zip(destinations, sources, strict=True):
        assert destination.dtype == source.dtype
        assert torch.equal(
            destination.view(-1).view(torch.uint8), source.view(-1).view(torch.uint8)
        )


def test_copy_grouped_dispatches_one_foreach_copy_per_dtype() -> None:
    destinations, sources = _mixed()
    with DispatchedOps() as seen:
        copy_grouped(destinations, sources)
    assert seen.ops == Counter({"_foreach_copy_": 3})


def test_copy_grouped_rejects_sequences_of_different_lengths() -> None:
    destinations, sources = _mixed()
    with pytest.raises(ValueError, match=r"shorter|longer"):
        copy_grouped(destinations[:-1], sources)


@pytest.mark.parametrize("mode", ["grad", "no_grad", "inference"])
def test_fresh_copy_is_an_ordinary_leaf_with_the_inputs_layout_and_bits(mode: str) -> None:
    # a static input must hold no autograd history of the step that recorded it (it would keep
    # that step's graph alive), and be writable by a later call outside inference mode
    weight = torch.randn(4, 6, requires_grad=True)
    live = (torch.randn(3, 4) @ weight).t()  # a non-leaf with transposed strides
    contexts = {
        "grad": torch.enable_grad,
        "no_grad": torch.no_grad,
        "inference": torch.inference_mode,
    }
    with contexts[mode]():
        static = fresh_copy(live.detach() if mode == "inference" else live)
    assert static.is_leaf
    assert static.grad_fn is None
    assert not static.requires_grad
    assert not static.is_inference()
    assert static.stride() == live.stride()
    assert torch.equal(static, live.detach())
    static.copy_(torch.zeros_like(static))
