"""CPU tests of the region recorder: routing, signatures, retire reasons, telemetry, pool order.

The comparisons with native run on the CPU stand-in, which re-runs each recorded body eagerly: both
sides execute the same kernels, so they pin the bookkeeping (static buffers, copy-in, gradient
routing and accumulation, signatures, retirements) and nothing about CUDA graph kernels;
``tests/replay/test_gpu_parity.py`` compares real graphs.
"""

from __future__ import annotations

import contextlib
import copy
import weakref
from collections.abc import Callable, Iterator

import pytest
import torch
from replay_nets import Forward, SmallNet, log_pool_routing, loss_of, make_net, train_digest
from torch import Tensor, nn

from lucid_yolo.replay import (
    ModuleRegion,
    PoolLeakError,
    RegionRecorder,
    ReplayConfigError,
    ReplayPool,
    ReplayRetiredWarning,
    RetireReason,
    ScratchLoan,
    TensorSpec,
    first_difference,
    grads_of,
    state_digest,
)
from lucid_yolo.replay._grad_layout import GradLayouts


@pytest.mark.parametrize("accumulation", [1, 2, 3])
def test_recorder_matches_native_with_accumulation(accumulation: int) -> None:
    native, replayed = make_net(), make_net()
    recorder = RegionRecorder(ModuleRegion(replayed))
    expected = train_digest(native, native, steps=3, accumulation=accumulation)
    got = train_digest(replayed, recorder, steps=3, accumulation=accumulation)
    assert first_difference(expected, got) is None
    assert recorder.telemetry.replays == 3 * accumulation - 1


def test_recorder_matches_native_with_parameter_used_twice() -> None:
    native, replayed = make_net(shared_twice=True), make_net(shared_twice=True)
    recorder = RegionRecorder(ModuleRegion(replayed))
    expected = train_digest(native, native, steps=2, accumulation=2)
    assert (
        first_difference(expected, train_digest(replayed, recorder, steps=2, accumulation=2))
        is None
    )


def test_recorder_matches_native_under_cpu_bf16_autocast() -> None:
    native, replayed = make_net(), make_net()
    recorder = RegionRecorder(ModuleRegion(replayed))

    def autocast(forward: Forward) -> Forward:
        def run(x: Tensor) -> dict[str, Tensor]:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return forward(x)

        return run

    expected = train_digest(native, autocast(native), steps=2, accumulation=2)
    got = train_digest(replayed, autocast(recorder), steps=2, accumulation=2)
    assert first_difference(expected, got) is None


def test_recorder_matches_native_under_autocast_without_cast_cache() -> None:
    # mid is used twice: with the cache off eager sums its two gradients in fp32, with the
    # cache on in bf16; the replay must follow the caller's setting.
    native, replayed = make_net(shared_twice=True), make_net(shared_twice=True)
    recorder = RegionRecorder(ModuleRegion(replayed))

    def uncached(forward: Forward) -> Forward:
        def run(x: Tensor) -> dict[str, Tensor]:
            with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
                return {k: v.float() for k, v in forward(x).items()}

        return run

    expected = train_digest(native, uncached(native), steps=2, accumulation=2)
    got = train_digest(replayed, uncached(recorder), steps=2, accumulation=2)
    assert first_difference(expected, got) is None
    assert recorder.telemetry.replays == 3


class _BackwardAutocastSpy(torch.autograd.Function):
    """Identity whose backward notes whether CPU autocast was on while it ran."""

    seen: list[bool] = []  # noqa: RUF012 (one list per test run, cleared by the test)

    @staticmethod
    def forward(ctx: object, x: Tensor) -> Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: Tensor) -> Tensor:
        _BackwardAutocastSpy.seen.append(torch.is_autocast_enabled("cpu"))
        return grad


class _SpiedLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 8, generator=torch.Generator().manual_seed(0)))

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        return {"out": _BackwardAutocastSpy.apply(x @ self.weight)}


def test_recorder_records_backward_without_the_callers_autocast() -> None:
    # The region is called under autocast and its backward started after leaving it, as
    # Lightning does: every backward the recorder runs (reach, warm-up, capture) must see
    # autocast off too, or a float32 matrix product's backward would run in bf16.
    recorder = RegionRecorder(ModuleRegion(_SpiedLinear()))
    _BackwardAutocastSpy.seen.clear()
    for _ in range(3):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = recorder(torch.randn(4, 8))["out"]
        out.float().square().sum().backward()
    assert recorder.telemetry.replays == 2
    assert _BackwardAutocastSpy.seen
    assert not any(_BackwardAutocastSpy.seen)


def test_recorder_retires_when_backward_runs_under_autocast() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = recorder(torch.randn(2, 3, 8, 8))
        with pytest.warns(ReplayRetiredWarning, match="backward-autocast.*after leaving"):
            out["a.box"].float().sum().backward()
    assert recorder.retired is not None
    assert recorder.retired.reason is RetireReason.BACKWARD_AUTOCAST


def test_recorder_first_gradient_does_not_alias_static_buffer() -> None:
    net = make_net()
    recorder = RegionRecorder(ModuleRegion(net), warmup_steps=0)
    loss_of(recorder(torch.randn(2, 3, 8, 8)), torch.randn(2, 4, 8, 8)).backward()
    static_ptrs = {
        g.data_ptr()
        for rec in recorder._recordings.values()
        for grads in rec.graphs.static_grads.values()
        for g in grads
        if g is not None
    }
    assert all(
        p.grad is not None and p.grad.data_ptr() not in static_ptrs for p in net.parameters()
    )


def test_recorder_later_microbatch_accumulates_in_place() -> None:
    net = make_net()
    recorder = RegionRecorder(ModuleRegion(net), warmup_steps=0)
    loss_of(recorder(torch.randn(2, 3, 8, 8)), torch.randn(2, 4, 8, 8)).backward()
    first = {name: (p.grad.data_ptr(), p.grad.clone()) for name, p in net.named_parameters()}
    loss_of(recorder(torch.randn(2, 3, 8, 8)), torch.randn(2, 4, 8, 8)).backward()
    for name, p in net.named_parameters():
        assert p.grad is not None
        assert p.grad.data_ptr() == first[name][0]
        assert not torch.equal(p.grad, first[name][1])


def test_recorder_recording_leaves_batchnorm_and_rng_untouched() -> None:
    native, replayed = make_net(), make_net()
    recorder = RegionRecorder(ModuleRegion(replayed), warmup_steps=0, capture_warmup=3)
    x = torch.randn(2, 3, 8, 8)
    torch.manual_seed(5)
    native(x)
    native_rng = torch.get_rng_state()
    torch.manual_seed(5)
    recorder(x)
    assert torch.equal(torch.get_rng_state(), native_rng)
    assert first_difference(state_digest(native), state_digest(replayed)) is None
    assert int(replayed.bn.num_batches_tracked) == 1


def test_recorder_warmup_steps_run_native() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=2)
    for _ in range(3):
        loss_of(recorder(torch.randn(2, 3, 8, 8)), torch.randn(2, 4, 8, 8)).backward()
    telemetry = recorder.telemetry.as_dict()
    assert telemetry["native.warm-up"] == 2
    assert telemetry["recordings"] == 1
    assert telemetry["replays"] == 1
    assert telemetry["graph_launches"] == 2


def test_recorder_no_grad_runs_native() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0)
    with torch.no_grad():
        recorder(torch.randn(2, 3, 8, 8))
    assert recorder.telemetry.native_calls["no-grad"] == 1
    assert recorder.recordings == 0


def test_recorder_disabled_runs_native() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0, enabled=False)
    recorder(torch.randn(2, 3, 8, 8))
    assert recorder.telemetry.native_calls["disabled"] == 1


def test_recorder_new_input_shape_records_again() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0)
    recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    recorder(torch.randn(2, 3, 16, 16))["a.box"].sum().backward()
    assert recorder.recordings == 2


def test_recorder_new_stride_records_again() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0)
    x = torch.randn(2, 3, 8, 8)
    recorder(x)["a.box"].sum().backward()
    recorder(x.contiguous(memory_format=torch.channels_last))["a.box"].sum().backward()
    assert recorder.recordings == 2


def test_recorder_eval_flag_records_again() -> None:
    net = make_net()
    recorder = RegionRecorder(ModuleRegion(net), warmup_steps=0)
    recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    net.drop.eval()
    recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    assert recorder.recordings == 2


def test_recorder_changed_module_scalar_records_again() -> None:
    net = make_net()
    recorder = RegionRecorder(ModuleRegion(net), warmup_steps=0)
    recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    net.bn.momentum = 0.5
    recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    assert recorder.recordings == 2


def test_recorder_autocast_change_records_again() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0)
    recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = recorder(torch.randn(2, 3, 8, 8))
    out["a.box"].float().sum().backward()
    assert recorder.recordings == 2


def test_recorder_signature_limit_runs_native() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0, max_signatures=1)
    recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    with pytest.warns(ReplayRetiredWarning, match="signature-limit"):
        recorder(torch.randn(1, 3, 8, 8))["a.box"].sum().backward()
    assert recorder.telemetry.retirements[RetireReason.SIGNATURE_LIMIT] == 1
    assert recorder.telemetry.native_calls["retired-signature"] == 1
    assert recorder.retired is None


def test_recorder_unsupported_input_runs_native() -> None:
    class TakesList(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, xs: list[Tensor]) -> Tensor:
            return self.lin(xs[0])

    recorder = RegionRecorder(ModuleRegion(TakesList()), warmup_steps=0)
    with pytest.warns(ReplayRetiredWarning, match="unsupported-input.*'list'"):
        recorder([torch.randn(1, 2)])
    assert recorder.telemetry.native_calls["unsupported-input"] == 1


def test_recorder_scalar_input_is_part_of_signature() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x: Tensor, scale: float) -> Tensor:
            return self.lin(x) * scale

    recorder = RegionRecorder(ModuleRegion(Scaled()), warmup_steps=0)
    x = torch.randn(1, 2)
    recorder(x, 1.0).sum().backward()
    out = recorder(x, 2.0)
    assert recorder.recordings == 2
    assert torch.equal(out, recorder.region.module.lin(x).detach() * 2.0)


def test_recorder_retires_when_forward_altered() -> None:
    net = make_net()
    recorder = RegionRecorder(ModuleRegion(net), warmup_steps=0)
    recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    net.head_a.forward = lambda x: x  # type: ignore[method-assign]
    with pytest.warns(ReplayRetiredWarning, match="forward-altered.*Conv2d"):
        out = recorder(torch.randn(2, 3, 8, 8))
    assert out["a.box"].shape[1] == 8
    assert recorder.retired is not None
    assert recorder.retired.reason is RetireReason.FORWARD_ALTERED


def test_recorder_retires_on_module_hook() -> None:
    net = make_net()
    recorder = RegionRecorder(ModuleRegion(net), warmup_steps=0)
    calls = []
    net.bn.register_forward_hook(lambda *_: calls.append(1))
    with pytest.warns(ReplayRetiredWarning, match="module-hooks.*BatchNorm2d"):
        recorder(torch.randn(2, 3, 8, 8))
    recorder(torch.randn(2, 3, 8, 8))
    assert calls == [1, 1]
    assert recorder.telemetry.native_calls["retired"] == 2


def test_recorder_retires_on_global_module_hook() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0)
    handle = nn.modules.module.register_module_forward_hook(lambda *_: None)
    try:
        with pytest.warns(ReplayRetiredWarning, match="registered globally"):
            recorder(torch.randn(2, 3, 8, 8))
    finally:
        handle.remove()


def test_recorder_retires_on_parameter_hook() -> None:
    net = make_net()
    recorder = RegionRecorder(ModuleRegion(net), warmup_steps=0)
    net.stem.weight.register_post_accumulate_grad_hook(lambda p: None)
    with pytest.warns(ReplayRetiredWarning, match="parameter-hooks"):
        recorder(torch.randn(2, 3, 8, 8))


def test_recorder_retires_when_parameter_storage_moves() -> None:
    net = make_net()
    recorder = RegionRecorder(ModuleRegion(net), warmup_steps=0)
    recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    net.stem.weight.data = net.stem.weight.data.clone()
    with pytest.warns(ReplayRetiredWarning, match="parameter-replaced.*storage moved"):
        recorder(torch.randn(2, 3, 8, 8))


def test_recorder_retires_when_parameter_replaced() -> None:
    net = make_net()
    recorder = RegionRecorder(ModuleRegion(net), warmup_steps=0)
    net.stem.weight = nn.Parameter(net.stem.weight.detach().clone())
    with pytest.warns(ReplayRetiredWarning, match="parameter-replaced.*object was replaced"):
        recorder(torch.randn(2, 3, 8, 8))


def test_recorder_retires_on_batchnorm_cumulative_momentum() -> None:
    net = make_net()
    net.bn.momentum = None
    recorder = RegionRecorder(ModuleRegion(net), warmup_steps=0)
    with pytest.warns(ReplayRetiredWarning, match="unsupported-module.*momentum=None"):
        recorder(torch.randn(2, 3, 8, 8))
    assert recorder.recordings == 0


def test_recorder_retires_on_sync_batchnorm() -> None:
    net = nn.SyncBatchNorm.convert_sync_batchnorm(make_net())
    recorder = RegionRecorder(ModuleRegion(net), warmup_steps=0)
    with pytest.warns(ReplayRetiredWarning, match="unsupported-module.*SyncBatchNorm exchanges"):
        recorder(torch.randn(2, 3, 8, 8))
    assert recorder.recordings == 0


class _Syncs(nn.Module):
    """Calls ``.item()`` inside its forward: recording must fail and leave no trace."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x: Tensor) -> Tensor:
        y = self.bn(x)
        return y * float(y.detach().abs().max())


def test_recorder_capture_failure_names_op_and_restores_state() -> None:
    torch.manual_seed(0)
    native, replayed = _Syncs(), _Syncs()
    recorder = RegionRecorder(ModuleRegion(replayed), warmup_steps=0)
    x = torch.randn(4, 3)
    with pytest.warns(ReplayRetiredWarning, match=r"capture-failed.*_local_scalar_dense.*\.item"):
        got = recorder(x)
    assert torch.equal(got, native(x))
    assert first_difference(state_digest(native), state_digest(replayed)) is None
    assert recorder.telemetry.native_calls["retired-signature"] == 1
    recorder(x)
    assert recorder.telemetry.retirements[RetireReason.CAPTURE_FAILED] == 1


def test_recorder_retires_parameter_shared_outside_region() -> None:
    net = make_net()
    recorder = RegionRecorder(ModuleRegion(net), warmup_steps=0)
    out = recorder(torch.randn(2, 3, 8, 8))
    loss = out["a.box"].sum() + net.head_a.bias.square().sum()
    with pytest.warns(ReplayRetiredWarning, match="shared-parameter"):
        loss.backward()
    assert recorder.retired is not None


def test_recorder_parameter_inside_only_is_not_flagged() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0)
    recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    assert recorder.retired is None


def test_recorder_retires_parameter_shared_outside_region_on_a_later_replay() -> None:
    net = make_net()
    recorder = RegionRecorder(ModuleRegion(net), warmup_steps=0)
    for _ in range(2):
        recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    assert recorder.retired is None
    out = recorder(torch.randn(2, 3, 8, 8))
    with pytest.warns(ReplayRetiredWarning, match="shared-parameter.*parameter 6 of 10"):
        (out["a.box"].sum() + net.head_a.weight.square().sum()).backward()
    assert recorder.retired is not None
    assert recorder.retired.reason is RetireReason.SHARED_PARAMETER


@pytest.mark.parametrize("direct_gradients", [False, True])
def test_recorder_retires_input_used_inside_and_outside_region(direct_gradients: bool) -> None:
    recorder = RegionRecorder(
        ModuleRegion(make_net()), warmup_steps=0, direct_gradients=direct_gradients
    )
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    features = x * 2.0
    recorder(features)["a.box"].sum().backward(retain_graph=True)
    assert recorder.retired is None
    features = x * 2.0
    out = recorder(features)
    with pytest.warns(ReplayRetiredWarning, match="shared-input.*input 0"):
        (out["a.box"].sum() + features.sum()).backward()
    assert recorder.retired is not None
    assert recorder.retired.reason is RetireReason.SHARED_INPUT


def test_recorder_second_forward_before_backward_runs_native() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0)
    x1, x2 = torch.randn(2, 3, 8, 8), torch.randn(2, 3, 8, 8)
    first = recorder(x1)
    with pytest.warns(ReplayRetiredWarning, match="retired for this call.*interleaved"):
        second = recorder(x2)
    assert recorder.telemetry.native_calls["interleaved"] == 1
    assert recorder.telemetry.retirements[RetireReason.INTERLEAVED] == 1
    assert recorder.retired is None
    with pytest.warns(ReplayRetiredWarning, match="shared-parameter"):
        (first["a.box"].sum() + second["a.box"].sum()).backward()


def test_recorder_discarded_outputs_release_the_pool() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0)
    recorder(torch.randn(2, 3, 8, 8))
    recorder(torch.randn(2, 3, 8, 8))
    assert recorder.telemetry.replays == 2


class _Tail(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x: Tensor) -> Tensor:
        return self.bn(self.conv(x))


def test_recorder_chained_regions_sharing_pool_match_native() -> None:
    torch.manual_seed(0)
    head_n, tail_n = SmallNet(), _Tail()
    head_r, tail_r = copy.deepcopy(head_n), copy.deepcopy(tail_n)
    pool = ReplayPool("cpu")
    first = RegionRecorder(ModuleRegion(head_r), pool=pool, warmup_steps=0, name="head")
    second = RegionRecorder(ModuleRegion(tail_r), pool=pool, warmup_steps=0, name="tail")
    for step in range(3):
        x = torch.randn(2, 3, 8, 8)
        torch.manual_seed(step)
        tail_n(head_n(x)["a.box"]).square().mean().backward()
        torch.manual_seed(step)
        second(first(x)["a.box"]).square().mean().backward()
    expected = state_digest(
        {"h": head_n, "t": tail_n, "gh": grads_of(head_n), "gt": grads_of(tail_n)}
    )
    got = state_digest({"h": head_r, "t": tail_r, "gh": grads_of(head_r), "gt": grads_of(tail_r)})
    assert first_difference(expected, got) is None
    assert second.telemetry.replays == 3
    assert second.telemetry.native_calls["interleaved"] == 0


def test_recorder_chained_region_reads_the_earlier_static_output_in_place() -> None:
    pool = ReplayPool("cpu")
    first = RegionRecorder(ModuleRegion(make_net()), pool=pool, warmup_steps=0, name="head")
    second = RegionRecorder(ModuleRegion(_Tail()), pool=pool, warmup_steps=0, name="tail")
    for _ in range(2):
        box = first(torch.randn(2, 3, 8, 8))["a.box"]
        second(box).square().mean().backward()
    (recording,) = second._recordings.values()
    assert recording.read_in_place == (0,)
    assert recording.static_inputs[0].data_ptr() == box.data_ptr()
    assert second.telemetry.replays == 2
    assert second.static_input(0, TensorSpec.of(box)) is None  # not the caller's to write


def test_recorder_runs_native_when_an_in_place_input_is_another_tensor() -> None:
    pool = ReplayPool("cpu")
    first = RegionRecorder(ModuleRegion(make_net()), pool=pool, warmup_steps=0, name="head")
    tail = _Tail()
    second = RegionRecorder(ModuleRegion(tail), pool=pool, warmup_steps=0, name="tail")
    second(first(torch.randn(2, 3, 8, 8))["a.box"]).square().mean().backward()
    box = first(torch.randn(2, 3, 8, 8))["a.box"]
    before = box.detach().clone()
    other = box * 2.0
    with pytest.warns(ReplayRetiredWarning, match=r"inputs-changed.*\[0\]"):
        out = second(other)
    assert torch.equal(out, tail(other))  # type: ignore[arg-type]
    assert torch.equal(box, before)  # the head's static output was not written
    assert second.telemetry.native_calls["inputs-changed"] == 1
    out.square().mean().backward()  # type: ignore[union-attr]


def _watch_pool_routing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Log routing into the pool and each region's forward as events."""
    events: list[str] = []
    log_pool_routing(monkeypatch, events)

    def logged(name: str, forward: Callable[..., object]) -> Callable[..., object]:
        def run(self: nn.Module, x: Tensor) -> object:
            events.append(name)
            return forward(self, x)

        return run

    monkeypatch.setattr(SmallNet, "forward", logged("head", SmallNet.forward))
    monkeypatch.setattr(_Tail, "forward", logged("tail", _Tail.forward))
    return events


def _chained_steps(steps: int, warmup_steps: int) -> None:
    pool = ReplayPool("cpu")
    first = RegionRecorder(ModuleRegion(make_net()), pool=pool, warmup_steps=warmup_steps)
    second = RegionRecorder(
        ModuleRegion(_Tail()), pool=pool, warmup_steps=warmup_steps, capture_warmup=1
    )
    for _ in range(steps):
        second(first(torch.randn(2, 3, 8, 8))["a.box"]).square().mean().backward()


def test_recorder_later_region_warms_up_in_the_pool_and_leaves_it_before_capture(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = _watch_pool_routing(monkeypatch)
    _chained_steps(steps=2, warmup_steps=1)
    # step 1 native; step 2: the head records outside the pool (no graph holds it yet: two
    # warm-up forwards, the captured one, the replay), then the tail warms up inside the pool
    # and leaves it before its captured forward and its replay
    assert events == [
        *("head", "tail"),
        *("head", "head", "head", "head"),
        *("route", "tail", "unroute", "tail", "tail"),
    ]


def test_recorder_without_a_native_call_first_warms_up_outside_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = _watch_pool_routing(monkeypatch)
    _chained_steps(steps=1, warmup_steps=0)
    assert "route" not in events
    assert events.count("tail") == 3  # warm-up, capture, replay


def test_recorder_held_back_by_defer_recording_then_warms_up_in_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # warmup_steps=0 alone warms up beside the pool (above); a call held back first is the
    # native call after which the recording may borrow the pool's scratch
    events = _watch_pool_routing(monkeypatch)
    pool = ReplayPool("cpu")
    first = RegionRecorder(ModuleRegion(make_net()), pool=pool, warmup_steps=0)
    second = RegionRecorder(ModuleRegion(_Tail()), pool=pool, warmup_steps=0, capture_warmup=1)
    for held in (True, False):
        second.defer_recording = held
        second(first(torch.randn(2, 3, 8, 8))["a.box"]).square().mean().backward()
    telemetry = second.telemetry.as_dict()
    assert (telemetry["native.warm-up"], telemetry["recordings"]) == (1, 1)
    assert events.count("route") == 1


def test_recorder_lets_a_pool_leak_stop_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([frozenset(), frozenset({(0, 512)}), frozenset({(0, 512)})])
    monkeypatch.setattr(ReplayPool, "live_blocks", lambda self: next(readings))
    pool = ReplayPool("cpu")
    first = RegionRecorder(ModuleRegion(make_net()), pool=pool, name="head")
    second = RegionRecorder(ModuleRegion(_Tail()), pool=pool, name="tail")
    second(first(torch.randn(2, 3, 8, 8))["a.box"]).square().mean().backward()
    with pytest.raises(PoolLeakError, match="still alive"):
        second(first(torch.randn(2, 3, 8, 8))["a.box"])
    assert second.retired is None
    assert second.telemetry.retirements.total() == 0


@pytest.mark.parametrize("direct_gradients", [False, True])
def test_recorder_input_gradient_matches_native(direct_gradients: bool) -> None:
    native, replayed = make_net(), make_net()
    recorder = RegionRecorder(
        ModuleRegion(replayed), warmup_steps=0, direct_gradients=direct_gradients
    )
    x = torch.randn(2, 3, 8, 8)
    xn, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    for step in range(2):
        torch.manual_seed(step)
        native(xn)["a.box"].sum().backward()
        torch.manual_seed(step)
        recorder(xr)["a.box"].sum().backward()
    assert xn.grad is not None
    assert xr.grad is not None
    assert torch.equal(xn.grad, xr.grad)
    assert (
        first_difference(state_digest(grads_of(native)), state_digest(grads_of(replayed))) is None
    )


def test_recorder_counts_group_without_gradient() -> None:
    groups = {"a": ["a.box"], "b": ["b.box"]}
    recorder = RegionRecorder(ModuleRegion(make_net(), groups), warmup_steps=0)
    recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    assert recorder.telemetry.as_dict()["ungraded.b"] == 1
    assert "ungraded.a" not in recorder.telemetry.as_dict()


def test_recorder_group_without_gradient_leaves_its_parameters_without_grad() -> None:
    native, replayed = make_net(), make_net()
    recorder = RegionRecorder(ModuleRegion(replayed), warmup_steps=0)
    x = torch.randn(2, 3, 8, 8)
    for step in range(2):
        torch.manual_seed(step)
        native(x)["a.box"].sum().backward()
        torch.manual_seed(step)
        recorder(x)["a.box"].sum().backward()
    assert replayed.head_b.weight.grad is None
    assert (
        first_difference(state_digest(grads_of(native)), state_digest(grads_of(replayed))) is None
    )


def test_recorder_group_used_in_part_leaves_unreached_parameters_without_grad() -> None:
    # One group holds both heads; the loss reads only a.box. Eager leaves head_b's .grad None
    # (so momentum and weight decay skip it); the replay must not hand it zeros.
    groups = {"heads": ["a.box", "b.box"]}
    native, replayed = make_net(), make_net()
    recorder = RegionRecorder(ModuleRegion(replayed, groups), warmup_steps=0)
    x = torch.randn(2, 3, 8, 8)
    for step in range(2):
        torch.manual_seed(step)
        native(x)["a.box"].sum().backward()
        torch.manual_seed(step)
        recorder(x)["a.box"].sum().backward()
    assert recorder.telemetry.replays == 2
    assert replayed.head_b.weight.grad is None
    assert replayed.head_a.weight.grad is not None
    assert (
        first_difference(state_digest(grads_of(native)), state_digest(grads_of(replayed))) is None
    )


class _OffsetTail(nn.Module):
    """A chained region whose ``offset`` output does not depend on its input."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 3, 1)
        self.offset = nn.Parameter(torch.ones(3))

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        return {"feat": self.conv(x), "offset": self.offset * 2.0}


def test_recorder_chained_region_whose_input_gets_no_gradient_hands_none() -> None:
    # The loss reads only the tail's offset: the tail hands its input no gradient, so the
    # head's backward gets none at all and its parameters stay without .grad, as natively.
    torch.manual_seed(0)
    head_n, tail_n = SmallNet(), _OffsetTail()
    head_r, tail_r = copy.deepcopy(head_n), copy.deepcopy(tail_n)
    pool = ReplayPool("cpu")
    first = RegionRecorder(ModuleRegion(head_r), pool=pool, warmup_steps=0, name="head")
    second = RegionRecorder(ModuleRegion(tail_r), pool=pool, warmup_steps=0, name="tail")
    for step in range(2):
        x = torch.randn(2, 3, 8, 8)
        torch.manual_seed(step)
        tail_n(head_n(x)["a.box"])["offset"].square().sum().backward()
        torch.manual_seed(step)
        tail = second(first(x)["a.box"])
        assert isinstance(tail, dict)
        tail["offset"].square().sum().backward()
    assert (first.telemetry.replays, second.telemetry.replays) == (2, 2)
    assert all(p.grad is None for p in head_r.parameters())
    assert tail_r.conv.weight.grad is None
    assert tail_r.offset.grad is not None
    assert tail_n.offset.grad is not None
    assert torch.equal(tail_r.offset.grad, tail_n.offset.grad)


def test_recorder_rejects_more_than_three_groups() -> None:
    groups = {"a": ["a.box"], "b": ["b.box"], "c": [], "d": []}
    recorder = RegionRecorder(ModuleRegion(make_net(), groups), warmup_steps=0)
    with pytest.warns(ReplayRetiredWarning, match="capture-failed.*4 prediction groups"):
        recorder(torch.randn(2, 3, 8, 8))


def test_recorder_rejects_groups_naming_unknown_output() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net(), {"a": ["a.box", "c.box"]}), warmup_steps=0)
    with pytest.warns(ReplayRetiredWarning, match=r"capture-failed.*\['c.box'\]"):
        recorder(torch.randn(2, 3, 8, 8))


def test_recorder_clone_outputs_survive_next_replay() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0, clone_outputs=True)
    first = recorder(torch.randn(2, 3, 8, 8))
    kept = first["a.box"].detach().clone()
    first["a.box"].sum().backward()
    recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    assert torch.equal(first["a.box"].detach(), kept)


def test_recorder_borrowed_outputs_are_overwritten_by_next_replay() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0)
    first = recorder(torch.randn(2, 3, 8, 8))
    kept = first["a.box"].detach().clone()
    first["a.box"].sum().backward()
    recorder(torch.randn(2, 3, 8, 8))
    assert not torch.equal(first["a.box"].detach(), kept)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"warmup_steps": -1}, "warmup_steps=-1"),
        ({"capture_warmup": 0}, "capture_warmup=0"),
        ({"max_signatures": 0}, "max_signatures=0"),
    ],
)
def test_recorder_rejects_bad_arguments(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ReplayConfigError, match=message):
        RegionRecorder(ModuleRegion(make_net()), **kwargs)  # type: ignore[arg-type]


def test_recorder_reset_records_again() -> None:
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0)
    recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    recorder.reset()
    assert recorder.recordings == 0
    recorder(torch.randn(2, 3, 8, 8))["a.box"].sum().backward()
    assert recorder.telemetry.recordings == 2


def test_recorder_releases_cached_blocks_before_warm_up_and_before_capture(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[str] = []
    monkeypatch.setattr(ReplayPool, "release_cached_blocks", lambda self: events.append("release"))
    original_forward = SmallNet.forward

    def forward(self: SmallNet, x: Tensor) -> dict[str, Tensor]:
        events.append("forward")
        return original_forward(self, x)

    monkeypatch.setattr(SmallNet, "forward", forward)
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0, capture_warmup=1)
    loss_of(recorder(torch.randn(2, 3, 8, 8)), torch.randn(2, 4, 8, 8)).backward()
    # release, warm-up forward (side stream), release, captured forward, replayed forward
    assert events[:4] == ["release", "forward", "release", "forward"]
    assert events.count("release") == 2


def test_recorder_warm_up_frees_each_pass_before_the_next_forward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    passes: list[list[weakref.ref[Tensor]]] = []
    alive_at_forward: list[int] = []
    original_forward = SmallNet.forward

    def forward(self: SmallNet, x: Tensor) -> dict[str, Tensor]:
        alive_at_forward.append(sum(any(r() is not None for r in refs) for refs in passes))
        outputs = original_forward(self, x)
        passes.append([weakref.ref(t) for t in outputs.values()])
        return outputs

    monkeypatch.setattr(SmallNet, "forward", forward)
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0, capture_warmup=3)
    loss_of(recorder(torch.randn(2, 3, 8, 8)), torch.randn(2, 4, 8, 8)).backward()
    # three warm-up forwards and the captured one: no earlier pass is alive when each starts
    assert alive_at_forward[:4] == [0, 0, 0, 0]


def test_recorder_allocates_static_grad_outputs_outside_the_side_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[str] = []
    original_side_stream = ReplayPool.side_stream

    @contextlib.contextmanager
    def side_stream(self: ReplayPool) -> Iterator[None]:
        events.append("enter")
        with original_side_stream(self):
            yield
        events.append("exit")

    original_buffer = GradLayouts.static_buffer

    def static_buffer(self: GradLayouts, key: object, index: int, output: Tensor) -> Tensor:
        events.append("buffer")
        return original_buffer(self, key, index, output)

    monkeypatch.setattr(ReplayPool, "side_stream", side_stream)
    monkeypatch.setattr(GradLayouts, "static_buffer", static_buffer)
    recorder = RegionRecorder(ModuleRegion(make_net()), warmup_steps=0)
    loss_of(recorder(torch.randn(2, 3, 8, 8)), torch.randn(2, 4, 8, 8)).backward()
    # first forward on the side stream, both buffers on the caller's, warm-up on the side stream
    assert events == ["enter", "exit", "buffer", "buffer", "enter", "exit"]


def _conv_bn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4))


def test_recorder_static_input_takes_the_next_input_in_place() -> None:
    replayed = _conv_bn()
    native = copy.deepcopy(replayed)
    recorder = RegionRecorder(ModuleRegion(replayed), warmup_steps=0)
    x0, x1 = torch.randn(2, 3, 8, 8), torch.randn(2, 3, 8, 8)
    assert recorder.static_input(0, TensorSpec.of(x0)) is None  # nothing recorded yet
    recorder(x0).sum().backward()  # type: ignore[union-attr]
    buffer = recorder.static_input(0, TensorSpec.of(x1))
    assert buffer is not None
    buffer.copy_(x1)
    replayed_out = recorder(buffer)
    assert recorder.telemetry.replays == 2
    assert torch.equal(replayed_out, native(x1))  # type: ignore[arg-type]


def test_recorder_static_input_refuses_another_layout_an_open_forward_and_retirement() -> None:
    recorder = RegionRecorder(ModuleRegion(_conv_bn()), warmup_steps=0)
    x = torch.randn(2, 3, 8, 8)
    recorder(x).sum().backward()  # type: ignore[union-attr]
    spec = TensorSpec.of(x)
    assert recorder.static_input(0, TensorSpec.of(torch.randn(1, 3, 8, 8))) is None
    assert recorder.static_input(1, spec) is None
    pending = recorder(x)
    assert recorder.static_input(0, spec) is None  # its backward graph may read the buffer
    pending.sum().backward()  # type: ignore[union-attr]
    assert recorder.static_input(0, spec) is not None
    with pytest.warns(ReplayRetiredWarning, match="forward-altered"):
        recorder.retire(RetireReason.FORWARD_ALTERED, "test")
    assert recorder.static_input(0, spec) is None


def test_recorder_runs_native_while_its_pool_is_lent() -> None:
    """A replay or a recording would write blocks that evaluation borrowed between steps."""
    recorder = RegionRecorder(ModuleRegion(make_net("cpu")))
    x, target = torch.randn(2, 3, 16, 16), torch.randn(2, 4, 16, 16)
    for _ in range(2):
        loss_of(recorder(x), target).backward()
    assert recorder.telemetry.replays == 1
    loan = ScratchLoan(recorder.pool)
    loan.open()
    loss_of(recorder(x), target).backward()
    assert recorder.telemetry.native_calls["pool-lent"] == 1
    assert recorder.telemetry.replays == 1
    loan.close()
    loss_of(recorder(x), target).backward()
    assert recorder.telemetry.replays == 2
