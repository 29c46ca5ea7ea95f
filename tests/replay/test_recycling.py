"""Private gradients reused between replayed backwards only when nothing else holds them."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import pytest
import torch
from replay_nets import loss_of, make_net
from torch import Tensor, nn

from lucid_yolo.replay import (
    ModuleRegion,
    RegionRecorder,
    ReplayPool,
    ReplayRetiredWarning,
    RetireReason,
)
from lucid_yolo.replay._recycling import GradientRecycler

STEPS = 6


def _kept_after_a_backward(recycler: GradientRecycler) -> nn.Parameter:
    """A parameter whose backward handed it a new gradient, which ``recycler`` keeps; the
    parameter's ``.grad`` is that gradient until the caller clears it."""
    param = nn.Parameter(torch.zeros(3))
    handed: list[int] = []

    class Region(torch.autograd.Function):
        @staticmethod
        def forward(ctx: object, p: Tensor) -> Tensor:
            return p.sum().detach()

        @staticmethod
        def backward(ctx: object, _: Tensor) -> Tensor:
            grad = torch.randn(3)
            handed.append(grad.data_ptr())
            recycler.keep_after_backward([0], [param], [grad])
            return grad

    Region.apply(param).backward()
    assert param.grad is not None
    assert param.grad.data_ptr() == handed[0]  # adopted, not copied
    return param


def test_a_gradient_nothing_else_holds_is_taken_once() -> None:
    recycler = GradientRecycler(1)
    param = _kept_after_a_backward(recycler)
    assert param.grad is not None
    address = param.grad.data_ptr()
    param.grad = None
    (taken,) = recycler.take([0])
    assert taken is not None
    assert taken.data_ptr() == address
    assert recycler.take([0]) == [None]


def test_take_never_compares_tensors_by_value(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch answers tensor == None by raising and catching a TypeError: 11 ms for 366 tensors,
    # which a replayed step at batch 4 paid twice over (session 30's first H200 run)
    recycler = GradientRecycler(1)
    param = _kept_after_a_backward(recycler)

    def refuse(self: Tensor, other: object) -> bool:
        raise AssertionError("a tensor was compared by value")

    monkeypatch.setattr(Tensor, "__eq__", refuse)
    assert recycler.take([0]) == [None]  # still param.grad
    param.grad = None
    assert recycler.take([0])[0] is not None


@pytest.mark.parametrize(
    "holder",
    [
        pytest.param(lambda g: g, id="the-tensor"),
        pytest.param(lambda g: g.view(-1), id="a-view"),
        pytest.param(lambda g: g.detach(), id="a-detached-alias"),
        pytest.param(lambda g: g.data, id="its-data"),
        pytest.param(lambda g: [g], id="a-list"),
        pytest.param(lambda g: torch.Tensor(g.untyped_storage()), id="a-tensor-over-its-storage"),
        pytest.param(lambda g: g.untyped_storage(), id="its-storage"),
        pytest.param(lambda g: (torch.ones(3, requires_grad=True) * g).sum(), id="a-saved-tensor"),
        pytest.param(torch.utils.dlpack.to_dlpack, id="a-dlpack-capsule"),
    ],
)
def test_a_gradient_held_elsewhere_is_not_taken(holder: Callable[[Tensor], object]) -> None:
    recycler = GradientRecycler(1)
    param = _kept_after_a_backward(recycler)
    assert param.grad is not None
    held = holder(param.grad)
    param.grad = None
    assert recycler.take([0]) == [None]
    del held
    (taken,) = recycler.take([0])
    assert taken is not None


def test_a_gradient_still_in_grad_is_not_taken() -> None:
    recycler = GradientRecycler(1)
    _kept_after_a_backward(recycler)
    assert recycler.take([0]) == [None]


def test_a_stopped_recycler_keeps_nothing() -> None:
    recycler = GradientRecycler(1)
    _kept_after_a_backward(recycler).grad = None
    recycler.stop()
    assert recycler.take([0]) == [None]
    _kept_after_a_backward(recycler).grad = None
    assert recycler.take([0]) == [None]


def _counting_reuse(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list to which every :meth:`GradientRecycler.take` appends how many tensors it gave."""
    reused: list[int] = []
    take = GradientRecycler.take

    def counted(self: GradientRecycler, positions: Sequence[int]) -> list[Tensor | None]:
        taken = take(self, positions)
        reused.append(sum(t is not None for t in taken))
        return taken

    monkeypatch.setattr(GradientRecycler, "take", counted)
    return reused


def _fit(
    monkeypatch: pytest.MonkeyPatch,
    recorded: bool,
    hold_every_grad: bool = False,
    accumulate: int = 1,
    device: str = "cpu",
) -> tuple[list[list[Tensor]], list[int]]:
    """Per backward, every parameter's gradient (cloned), and how many gradients each
    backward reused; ``.grad`` cleared every ``accumulate`` backwards."""
    reused = _counting_reuse(monkeypatch)
    torch.manual_seed(1)
    net = make_net(device, channels=8)
    recorder = RegionRecorder(ModuleRegion(net), pool=ReplayPool(device))
    x = torch.randn(2, 3, 16, 16, device=device)
    target = torch.randn(2, 4, 16, 16, device=device)
    grads: list[list[Tensor]] = []
    held: list[Tensor] = []
    for step in range(STEPS):
        images = x * (1 + step)
        outputs = recorder(images) if recorded else net(images)
        loss_of(outputs, target).backward()
        now = [p.grad for p in net.parameters() if p.grad is not None]
        grads.append([g.clone() for g in now])
        if hold_every_grad:
            held.extend(now)
        del now
        if (step + 1) % accumulate == 0:
            for p in net.parameters():
                p.grad = None
    if hold_every_grad:  # what the loop held kept the values autograd gave it
        given = itertools.chain.from_iterable(grads)
        assert all(torch.equal(h, g) for h, g in zip(held, given, strict=True))
    return grads, reused


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_replayed_steps_reuse_the_gradients_and_keep_native_bits(
    monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    native, _ = _fit(monkeypatch, recorded=False, device=device)
    replayed, reused = _fit(monkeypatch, recorded=True, device=device)
    for step_native, step_replayed in zip(native, replayed, strict=True):
        for a, b in zip(step_native, step_replayed, strict=True):
            assert torch.equal(a.view(torch.int32), b.view(torch.int32))
    # a native warm-up, then the recording's backward and every replayed one; from the first
    # replay on, each reuses every gradient of the backward before it
    assert reused == [0] + [len(replayed[0])] * (STEPS - 2)


def test_accumulated_gradients_keep_native_bits_and_are_reused_after_each_clear(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    native, _ = _fit(monkeypatch, recorded=False, accumulate=2)
    replayed, reused = _fit(monkeypatch, recorded=True, accumulate=2)
    for step_native, step_replayed in zip(native, replayed, strict=True):
        for a, b in zip(step_native, step_replayed, strict=True):
            assert torch.equal(a.view(torch.int32), b.view(torch.int32))
    # backwards 1-5 (0 is the native warm-up): a second micro-batch adds into .grad, which
    # stays kept; the first after a clear reuses it, once one was handed out (backward 2)
    assert reused == [0, 0, 0, len(replayed[0]), 0]


def test_gradients_held_by_the_loop_are_never_overwritten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, reused = _fit(monkeypatch, recorded=True, hold_every_grad=True)
    assert reused == [0] * (STEPS - 1)


def test_a_retired_recorder_lets_its_gradients_go() -> None:
    net = make_net(channels=8)
    recorder = RegionRecorder(ModuleRegion(net), pool=ReplayPool("cpu"))
    x, target = torch.randn(2, 3, 16, 16), torch.randn(2, 4, 16, 16)
    for _ in range(3):
        loss_of(recorder(x), target).backward()
        for p in net.parameters():
            p.grad = None
    with pytest.warns(ReplayRetiredWarning):
        recorder.retire(RetireReason.PARAMETER_REPLACED, "test")
    recording = next(iter(recorder._recordings.values()))
    assert recorder._recycler.take(recording.positions) == [None] * len(recording.params)


def test_recordings_of_one_recorder_share_one_kept_gradient_a_parameter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # two input sizes, two recordings: a parameter keeps one gradient, which either reuses
    reused = _counting_reuse(monkeypatch)
    net = make_net(channels=8)
    recorder = RegionRecorder(ModuleRegion(net), pool=ReplayPool("cpu"))
    sizes = [16, 16, 24, 24] + [16, 24] * 3
    for size in sizes:
        x, target = torch.randn(2, 3, size, size), torch.randn(2, 4, size, size)
        loss_of(recorder(x), target).backward()
        for p in net.parameters():
            p.grad = None
    assert recorder.recordings == 2
    parameters = len(list(net.parameters()))
    # from the first replay of the second size on, every backward reuses the last one's
    assert reused[-6:] == [parameters] * 6
    kept = [t for t in recorder._recycler._kept if t is not None]
    assert len(kept) == parameters
