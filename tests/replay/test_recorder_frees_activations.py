"""``RegionRecorder(frees_activations=True)``: the recording's backward frees the forward's
activations as a native backward does, and nothing else in the pool runs while its forward is
open (CPU stand-in; the memory itself is measured on the GPU, docs/engineering/whole-fit-speed.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from replay_nets import loss_of, make_net, train_digest

from lucid_yolo.replay import (
    FreedActivationsError,
    GraphedOptimizer,
    ModuleRegion,
    RegionRecorder,
    ReplayPool,
    ScratchLoan,
    first_difference,
)


@pytest.mark.parametrize("accumulation", [1, 2])
def test_freeing_recorder_matches_native(accumulation: int) -> None:
    native, replayed = make_net(), make_net()
    recorder = RegionRecorder(ModuleRegion(replayed), frees_activations=True)
    expected = train_digest(native, native, steps=3, accumulation=accumulation)
    got = train_digest(replayed, recorder, steps=3, accumulation=accumulation)
    assert first_difference(expected, got) is None
    assert recorder.telemetry.replays == 3 * accumulation - 1


@pytest.fixture
def retained(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """``retain_graph`` of every ``torch.autograd.grad`` call, in order."""
    flags: list[bool] = []
    grad: Callable[..., Any] = torch.autograd.grad

    def spy(*args: Any, **kwargs: Any) -> Any:
        flags.append(bool(kwargs.get("retain_graph")))
        return grad(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", spy)
    return flags


@pytest.mark.parametrize("frees", [False, True])
def test_each_pass_of_a_recording_frees_its_graph_at_its_last_backward(
    frees: bool, retained: list[bool]
) -> None:
    # SmallNet's two prediction groups give three gradient patterns ({a}, {b}, {a, b}): the
    # recording asks for reach once per output, then runs every pattern per warm-up pass and
    # per capture; each of those uses of a forward frees it at its last backward.
    recorder = RegionRecorder(
        ModuleRegion(make_net()), warmup_steps=0, capture_warmup=2, frees_activations=frees
    )
    recorder(torch.randn(2, 3, 8, 8))
    (recording,) = recorder._recordings.values()
    outputs, patterns = len(recording.differentiable), len(recording.graphs.static_grads)
    assert (outputs, patterns) == (2, 3)
    uses = [outputs, patterns, patterns, patterns]  # reach, two warm-up passes, the capture
    expected = [not frees or n < use - 1 for use in uses for n in range(use)]
    assert retained == expected


def _recorded(frees: bool, pool: ReplayPool) -> RegionRecorder:
    recorder = RegionRecorder(
        ModuleRegion(make_net()), pool=pool, frees_activations=frees, name=f"frees={frees}"
    )
    x, target = torch.randn(2, 3, 8, 8), torch.randn(2, 4, 8, 8)
    for _ in range(2):
        loss_of(recorder(x), target).backward()
    assert recorder.telemetry.replays == 1
    return recorder


def test_nothing_else_in_the_pool_runs_while_a_freeing_forward_is_open() -> None:
    pool = ReplayPool("cpu")
    freeing, other = _recorded(True, pool), _recorded(False, pool)
    net = make_net()
    optimizer = GraphedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), pool=pool)
    x, target = torch.randn(2, 3, 8, 8), torch.randn(2, 4, 8, 8)
    for _ in range(2):
        loss_of(net(x), target).backward()
        optimizer.step()
    assert optimizer.recorder.telemetry.replays == 1

    open_loss = loss_of(freeing(x), target)
    assert pool.exclusive_open()
    loss_of(other(x), target).backward()
    optimizer.step()
    loan = ScratchLoan(pool)
    loan.open()
    assert not loan.lending
    loan.close()
    assert other.telemetry.native_calls["exclusive-open"] == 1
    assert optimizer.recorder.telemetry.native_calls["exclusive-open"] == 1

    open_loss.backward()
    assert not pool.exclusive_open()
    loss_of(other(x), target).backward()
    optimizer.step()
    loan.open()
    assert loan.lending
    loan.close()
    assert other.telemetry.replays == 2
    assert optimizer.recorder.telemetry.replays == 2
    assert freeing.telemetry.replays == 2


def test_an_ordinary_open_forward_leaves_the_pool_to_the_others() -> None:
    pool = ReplayPool("cpu")
    ordinary = _recorded(False, pool)
    x, target = torch.randn(2, 3, 8, 8), torch.randn(2, 4, 8, 8)
    open_loss = loss_of(ordinary(x), target)
    assert pool.open_forwards()
    assert not pool.exclusive_open()
    loan = ScratchLoan(pool)
    loan.open()
    assert loan.lending
    loan.close()
    open_loss.backward()


def test_a_freeing_recorder_runs_its_own_second_forward_native() -> None:
    pool = ReplayPool("cpu")
    recorder = _recorded(True, pool)
    x, target = torch.randn(2, 3, 8, 8), torch.randn(2, 4, 8, 8)
    first = loss_of(recorder(x), target)
    second = loss_of(recorder(x), target)
    assert recorder.telemetry.native_calls["exclusive-open"] == 1
    second.backward()
    first.backward()
    assert recorder.telemetry.replays == 2
    assert recorder.retired is None
    assert not pool.exclusive_open()


def test_a_second_backward_through_a_freeing_replay_is_refused() -> None:
    # natively the graph's saved tensors are gone after a backward without retain_graph too
    recorder = _recorded(True, ReplayPool("cpu"))
    x, target = torch.randn(2, 3, 8, 8), torch.randn(2, 4, 8, 8)
    loss = loss_of(recorder(x), target)
    loss.backward(retain_graph=True)
    with pytest.raises(FreedActivationsError, match="second backward"):
        loss.backward()


def test_the_exclusive_mark_follows_how_the_recording_was_captured() -> None:
    pool = ReplayPool("cpu")
    recorder = _recorded(True, pool)
    recorder.frees_activations = False
    x, target = torch.randn(2, 3, 8, 8), torch.randn(2, 4, 8, 8)
    loss = loss_of(recorder(x), target)
    assert pool.exclusive_open()
    loss.backward()
    assert recorder.telemetry.replays == 2
