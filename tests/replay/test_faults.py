"""Replay faults injected mid-run (issue 15): each one is survived, and the run stays native.

One training loop (a replayed region, a graphed SGD update, two micro-batches per step) runs
twice from the same seed, natively and replayed, with the same fault injected at step
:data:`AT`, after the region and the update have recorded. The digests of the weights, buffers,
optimizer, GradScaler, every step's losses and hook calls must be identical, so the steps after
the fault are native's too; the replay's telemetry must name the fault (``retired.<reason>`` or
``recorded.<cause>``) and the retirement be warned. On the CPU the replay library's stand-in
runs the same bookkeeping; the ``cuda`` cases replay real CUDA graphs (``-m gpu``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import pytest
import torch
from replay_nets import SmallNet, loss_of
from torch import Tensor, nn

from lucid_yolo.replay import (
    GraphedOptimizer,
    ModuleRegion,
    RegionRecorder,
    RetireReason,
    first_difference,
    state_digest,
)
from lucid_yolo.replay._graphs import RegionGraphs

pytestmark = pytest.mark.usefixtures("deterministic")

STEPS = 6
AT = 3
"""The step a fault is injected at: the region has recorded and replayed by then."""

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ],
    ),
]


class _OomOnCapture(SmallNet):
    """Raises CUDA's out-of-memory error whenever a forward runs inside a capture."""

    capturing = False

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        if _OomOnCapture.capturing or (x.is_cuda and torch.cuda.is_current_stream_capturing()):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (test)")
        return super().forward(x)


class _SyncInForward(SmallNet):
    """Reads a tensor's value on the host inside the region (``float()`` of a tensor)."""

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        out = super().forward(x)
        return {k: v * float(v.detach().abs().max() > 0) for k, v in out.items()}


NETS: dict[str, type[SmallNet]] = {"oom": _OomOnCapture, "sync": _SyncInForward}


@pytest.fixture
def oom_on_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flag CPU stand-in captures, so that :class:`_OomOnCapture` fails there too."""
    original = RegionGraphs.capture

    def flagged(self: RegionGraphs, *args: object, **kwargs: object) -> None:
        _OomOnCapture.capturing = True
        try:
            original(self, *args, **kwargs)  # type: ignore[arg-type]
        finally:
            _OomOnCapture.capturing = False

    monkeypatch.setattr(RegionGraphs, "capture", flagged)


@dataclass
class Run:
    """What one run leaves: state digests, hook calls and the replay's counters."""

    digests: dict[str, str]
    scale: float = 1.0
    """The GradScaler's final scale (1.0 without one)."""
    telemetry: dict[str, int] = field(default_factory=dict)
    warned: set[str] = field(default_factory=set)
    """Retirement reasons the run warned about."""

    def causes(self, kind: str) -> dict[str, int]:
        """``{"<recorder>.<reason or cause>": count}`` of the ``retired`` or ``recorded`` keys."""
        marker = f".{kind}."
        return {k.replace(marker, "."): v for k, v in self.telemetry.items() if marker in k}


def _run(device: str, fault: str, *, replay: bool) -> Run:
    torch.manual_seed(0)
    net = NETS.get(fault, SmallNet)().to(device)
    extra = nn.Conv2d(4, 4, 1).to(device).requires_grad_(False)
    region: RegionRecorder | None = None
    forward = net
    if replay:
        region = RegionRecorder(ModuleRegion(net), name="net", warmup_steps=1)
        forward = region  # type: ignore[assignment]
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    update = GraphedOptimizer(optimizer, warmup_steps=1) if replay else optimizer
    scaler = torch.amp.GradScaler(device, init_scale=2.0**8) if fault == "nan" else None
    hook_calls: list[int] = []
    losses: list[Tensor] = []
    gen = torch.Generator(device).manual_seed(1)
    for step in range(STEPS):
        if step == AT and fault == "hook":
            net.bn.register_forward_hook(lambda *_: hook_calls.append(1))
        if step == AT and fault == "param-group":
            optimizer.add_param_group({"params": list(extra.requires_grad_(True).parameters())})
        size = 16 if fault == "shape" and step >= AT else 8
        accumulation = 3 if fault == "accumulation" and step >= AT else 2
        for micro in range(accumulation):
            x = torch.randn(2, 3, size, size, device=device, generator=gen)
            target = torch.randn(2, 4, size, size, device=device, generator=gen)
            if fault == "nan" and step == AT and micro == 0:
                x[0, 0, 0, 0] = float("nan")
            torch.manual_seed(1000 + 10 * step + micro)
            outputs = dict(forward(x))
            outputs["a.box"] = extra(outputs["a.box"])
            loss = loss_of(outputs, target)
            (loss if scaler is None else scaler.scale(loss)).backward()
            losses.append(loss.detach())
        if scaler is None:
            update.step()
        else:
            scaler.step(update)  # type: ignore[arg-type]
            scaler.update()
        update.zero_grad()
    if device == "cuda":
        torch.cuda.synchronize()
    state = {"net": net, "extra": extra, "optimizer": optimizer, "losses": losses}
    if scaler is not None:
        state["scaler"] = scaler.state_dict()
    state["hook_calls"] = [torch.tensor(hook_calls)]
    run = Run(state_digest(state), 1.0 if scaler is None else scaler.get_scale())
    if region is not None:
        assert isinstance(update, GraphedOptimizer)
        for recorder in (region, update):
            counters = recorder.telemetry.as_dict()
            run.telemetry.update({f"{recorder_name(recorder)}.{k}": v for k, v in counters.items()})
    return run


def recorder_name(recorder: object) -> str:
    return "region" if isinstance(recorder, RegionRecorder) else "update"


def _both(device: str, fault: str) -> Run:
    """The replayed run, after checking it is bitwise the native one."""
    native = _run(device, fault, replay=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        replayed = _run(device, fault, replay=True)
    assert first_difference(native.digests, replayed.digests) is None
    replayed.warned = {
        str(w.message).split(": ")[2] for w in caught if "replay retired" in str(w.message)
    }
    return replayed


@pytest.mark.parametrize("device", DEVICES)
def test_fault_none_replays_every_step(device: str) -> None:
    run = _both(device, "none")
    assert run.telemetry["region.replays"] == 2 * STEPS - 1
    assert run.telemetry["update.replays"] == STEPS - 1
    assert run.causes("recorded") == {"region.first": 1, "update.first": 1}
    assert run.causes("retired") == {}
    assert run.warned == set()


@pytest.mark.parametrize("device", DEVICES)
def test_fault_input_shape_change_records_again(device: str) -> None:
    run = _both(device, "shape")
    assert run.causes("recorded") == {"region.first": 1, "region.inputs": 1, "update.first": 1}
    assert run.causes("retired") == {}
    # one warm-up call per shape; every later call replays, the new shape's included
    assert run.telemetry["region.replays"] == 2 * STEPS - 2


@pytest.mark.parametrize("device", DEVICES)
def test_fault_hook_added_after_recording_retires_module_hooks(device: str) -> None:
    run = _both(device, "hook")
    reason = RetireReason.MODULE_HOOKS.value
    assert run.causes("retired") == {f"region.{reason}": 1}
    assert run.warned == {reason}
    # the warm-up call, then every call from the hook on
    assert run.telemetry["region.native_calls"] == 1 + 2 * (STEPS - AT)


@pytest.mark.parametrize("device", DEVICES)
def test_fault_accumulation_changed_mid_run_keeps_replaying(device: str) -> None:
    run = _both(device, "accumulation")
    assert run.telemetry["region.replays"] == 2 * AT + 3 * (STEPS - AT) - 1
    assert run.causes("recorded") == {"region.first": 1, "update.first": 1}
    assert run.causes("retired") == {}


@pytest.mark.parametrize("device", DEVICES)
def test_fault_parameter_group_added_records_update_again(device: str) -> None:
    run = _both(device, "param-group")
    assert run.causes("recorded") == {
        "region.first": 1,
        "update.first": 1,
        "update.parameters+gradients+hyperparameters": 1,
    }
    assert run.causes("retired") == {}
    # one warm-up step per key; every later step replays, the new group's included
    assert run.telemetry["update.replays"] == STEPS - 2


@pytest.mark.parametrize("device", DEVICES)
def test_fault_nan_in_replayed_step_skipped_by_grad_scaler_as_native(device: str) -> None:
    run = _both(device, "nan")
    assert run.scale == 2.0**7  # backed off once, from the injected step
    assert run.telemetry["region.replays"] == 2 * STEPS - 1
    assert run.telemetry["update.replays"] == STEPS - 2
    assert run.causes("retired") == {}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.usefixtures("oom_on_capture")
def test_fault_out_of_memory_during_capture_retires_capture_failed(device: str) -> None:
    run = _both(device, "oom")
    reason = RetireReason.CAPTURE_FAILED.value
    assert run.causes("retired") == {f"region.{reason}": 1}
    assert run.warned == {reason}
    assert run.telemetry["region.recordings"] == 0
    assert run.telemetry["region.native_calls"] == 2 * STEPS


@pytest.mark.parametrize("device", DEVICES)
def test_fault_host_sync_inside_region_retires_capture_failed(device: str) -> None:
    run = _both(device, "sync")
    reason = RetireReason.CAPTURE_FAILED.value
    assert run.causes("retired") == {f"region.{reason}": 1}
    assert run.warned == {reason}
    assert run.telemetry["region.recordings"] == 0
    assert run.telemetry["update.replays"] == STEPS - 1


@pytest.mark.gpu
def test_gpu_failed_capture_leaves_the_thread_on_its_own_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A host sync breaks the capture, so capture_end raises. Some torch versions' graph exit
    # then skips the stream restore; this test gives every version that exit, so it fails
    # wherever the recorder relies on torch to restore the stream.
    failed: list[BaseException] = []
    exit_graph = torch.cuda.graph.__exit__

    def exit_leaving_the_capture_stream(self: torch.cuda.graph, *args: object) -> None:
        try:
            exit_graph(self, *args)
        except BaseException as error:
            failed.append(error)
            torch.cuda.set_stream(self.capture_stream)
            raise

    monkeypatch.setattr(torch.cuda.graph, "__exit__", exit_leaving_the_capture_stream)
    stream = torch.cuda.current_stream()
    run = _both("cuda", "sync")
    assert failed, "the broken capture's exit did not raise: this torch never leaves the stream"
    assert run.causes("retired") == {f"region.{RetireReason.CAPTURE_FAILED.value}": 1}
    assert torch.cuda.current_stream() == stream
