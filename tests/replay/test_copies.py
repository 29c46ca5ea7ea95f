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


def test_copy_grouped_copies_one_dtype_in_one_call_with_the_pairs_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sources = [torch.randn(5), torch.randn(2, 3).t(), torch.tensor([-0.0, float("nan")])]
    destinations = [torch.empty_like(s) for s in sources]
    calls: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = []
    foreach_copy = torch._foreach_copy_

    def recorded(targets: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        calls.append((targets, values))
        foreach_copy(targets, values)

    monkeypatch.setattr(torch, "_foreach_copy_", recorded)
    copy_grouped(tuple(destinations), tuple(sources))
    assert len(calls) == 1
    targets, values = calls[0]
    assert list(map(id, targets)) == list(map(id, destinations))
    assert list(map(id, values)) == list(map(id, sources))
    for destination, source in zip(destinations, sources, strict=True):
        assert torch.equal(destination.view(torch.int32), source.view(torch.int32))


def test_copy_grouped_keeps_destinations_of_two_devices_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    destinations = [torch.empty(2), torch.empty(2, device="meta"), torch.empty(3)]
    sources = [torch.ones(2), torch.ones(2, device="meta"), torch.ones(3)]
    devices: list[list[str]] = []
    foreach_copy = torch._foreach_copy_

    def recorded(targets: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        devices.append([t.device.type for t in targets])
        foreach_copy(targets, values)

    monkeypatch.setattr(torch, "_foreach_copy_", recorded)
    copy_grouped(destinations, sources)
    assert sorted(devices) == [["cpu", "cpu"], ["meta"]]


@pytest.mark.parametrize("cut", ["destinations", "sources"])
def test_copy_grouped_rejects_sequences_of_different_lengths(cut: str) -> None:
    for destinations, sources in (_mixed(), ([torch.empty(2)] * 3, [torch.ones(2)] * 3)):
        if cut == "destinations":
            destinations = destinations[:-1]
        else:
            sources = sources[:-1]
        with pytest.raises(ValueError, match="one source each"):
            copy_grouped(destinations, sources)


def test_copy_grouped_with_nothing_to_copy_launches_nothing() -> None:
    with DispatchedOps() as seen:
        copy_grouped([], [])
    assert not seen.ops


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
