"""The forward recorder: a forward without autograd recorded once per signature and replayed.

The CPU tests run on the stand-in, which re-runs the recorded body eagerly: they pin the
bookkeeping (when a call records, replays or runs native, static inputs, borrowed outputs,
restored state, retirements). The ``gpu`` tests compare real graphs with the eager forward bit
for bit, in and beside a training step's pool.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from replay_nets import loss_of, make_net, recorded_small_net
from torch import Tensor, nn

from lucid_yolo.replay import (
    ForwardRecorder,
    ModuleRegion,
    PoolLeakError,
    RegionRecorder,
    ReplayConfigError,
    ReplayPool,
    ReplayRetiredWarning,
    ScratchLoan,
    state_digest,
)


def _images(seed: int, batch: int = 2, size: int = 8, device: str = "cpu") -> Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed)).to(
        device
    )


def _bits(outputs: object) -> dict[str, str]:
    return state_digest({"outputs": outputs})


def test_forward_recorder_records_after_warm_up_and_replays_the_native_outputs() -> None:
    net = make_net().eval()
    recorder = ForwardRecorder(ModuleRegion(net))
    with torch.inference_mode():
        for seed in range(4):
            assert _bits(recorder(_images(seed))) == _bits(net(_images(seed)))
    telemetry = recorder.telemetry.as_dict()
    assert telemetry["native.warm-up"] == 1
    assert (telemetry["recordings"], telemetry["replays"]) == (1, 3)
    assert telemetry["retirements"] == 0


def test_forward_recorder_replays_under_no_grad_as_under_inference_mode() -> None:
    net = make_net().eval()
    recorder = ForwardRecorder(ModuleRegion(net), warmup_steps=0)
    with torch.inference_mode():
        recorder(_images(0))
    with torch.no_grad():
        outputs = recorder(_images(1))
        assert _bits(outputs) == _bits(net(_images(1)))
    assert recorder.telemetry.replays == 2


def test_forward_recorder_runs_native_with_gradients_on() -> None:
    net = make_net().eval()
    recorder = ForwardRecorder(ModuleRegion(net), warmup_steps=0)
    outputs = recorder(_images(0))
    assert isinstance(outputs, dict)
    assert outputs["a.box"].requires_grad  # autograd saw the native call
    assert recorder.telemetry.as_dict()["native.grad-enabled"] == 1
    assert recorder.recordings == 0


def test_forward_recorder_outputs_are_borrowed_unless_cloned() -> None:
    net = make_net().eval()
    borrowed = ForwardRecorder(ModuleRegion(net), warmup_steps=0)
    cloned = ForwardRecorder(ModuleRegion(net), warmup_steps=0, clone_outputs=True)
    with torch.inference_mode():
        first, kept = borrowed(_images(0)), cloned(_images(0))
        first_bits, kept_bits = _bits(first), _bits(kept)
        borrowed(_images(1))
        cloned(_images(1))
        assert _bits(first) != first_bits  # the next launch rewrote the static outputs
        assert _bits(kept) == kept_bits
        assert _bits(first) == _bits(net(_images(1)))


def test_forward_recorder_records_a_signature_per_shape_up_to_the_limit() -> None:
    net = make_net().eval()
    recorder = ForwardRecorder(ModuleRegion(net), warmup_steps=0, max_signatures=2)
    batches = [_images(batch, batch=batch) for batch in (4, 3, 2, 4, 3)]
    with torch.inference_mode(), pytest.warns(ReplayRetiredWarning, match="signature-limit"):
        outputs = [_bits(recorder(images)) for images in batches]
    with torch.inference_mode():
        assert outputs == [_bits(net(images)) for images in batches]
    telemetry = recorder.telemetry.as_dict()
    assert telemetry["recordings"] == 2
    assert telemetry["replays"] == 4
    assert telemetry["retired.signature-limit"] == 1
    assert telemetry["native.retired-signature"] == 1
    assert telemetry["recorded.inputs"] == 1  # the second recording says what changed


def test_forward_recorder_keys_on_the_training_flag() -> None:
    net = make_net().eval()
    recorder = ForwardRecorder(ModuleRegion(net), warmup_steps=0)
    with torch.inference_mode():
        recorder(_images(0))
        net.train()
        recorder(_images(1))
    assert recorder.telemetry.as_dict()["recorded.training"] == 1


def test_forward_recorder_restores_the_buffers_its_capture_warm_up_moves() -> None:
    # in training mode a forward without gradients still moves BatchNorm's running statistics
    # and draws dropout masks: the capture's warm-up must add neither a move nor a draw
    net = make_net().train()
    twin = make_net().train()
    recorder = ForwardRecorder(ModuleRegion(net), warmup_steps=0)
    with torch.no_grad():
        for seed in range(3):
            torch.manual_seed(seed)  # dropout draws: each side from the same generator state
            replayed = _bits(recorder(_images(seed)))
            torch.manual_seed(seed)
            assert replayed == _bits(twin(_images(seed)))
    assert state_digest(net) == state_digest(twin)


def test_forward_recorder_retires_when_a_hook_is_added() -> None:
    net = make_net().eval()
    recorder = ForwardRecorder(ModuleRegion(net), warmup_steps=0)
    calls: list[int] = []
    with torch.inference_mode():
        recorder(_images(0))
        net.mid.register_forward_hook(lambda *_: calls.append(1))
        with pytest.warns(ReplayRetiredWarning, match="module-hooks"):
            recorder(_images(1))
        recorder(_images(2))
    assert calls == [1, 1]  # the hook fired on every call after it came: each ran native
    assert recorder.retired is not None
    assert recorder.telemetry.as_dict()["native.retired"] == 2


def test_forward_recorder_runs_native_while_the_loan_lends_its_pool() -> None:
    pool = ReplayPool("cpu")
    loan = ScratchLoan(pool)
    recorder = ForwardRecorder(ModuleRegion(make_net().eval()), warmup_steps=0, pool=pool)
    with torch.inference_mode():
        recorder(_images(0))  # recorded: a graph now holds the pool
        loan.open()
        with loan.borrowing():
            recorder(_images(1))
        loan.close()
        recorder(_images(2))
    telemetry = recorder.telemetry.as_dict()
    assert telemetry["native.pool-lent"] == 1
    assert telemetry["replays"] == 2


def test_forward_recorder_runs_native_while_a_training_forward_awaits_its_backward() -> None:
    trained = make_net()
    pool = ReplayPool("cpu")
    step = RegionRecorder(ModuleRegion(trained), pool=pool)
    evaluated = ForwardRecorder(ModuleRegion(make_net().eval()), warmup_steps=0, pool=pool)
    target = torch.randn(2, 4, 8, 8)
    for _ in range(2):
        loss_of(step(_images(0)), target).backward()
    outputs = step(_images(1))  # replayed: its backward graph still reads the pool
    assert pool.open_forwards()
    with torch.inference_mode(), pytest.warns(ReplayRetiredWarning, match="interleaved"):
        evaluated(_images(2))
    loss_of(outputs, target).backward()
    with torch.inference_mode():
        evaluated(_images(3))
    telemetry = evaluated.telemetry.as_dict()
    assert telemetry["native.interleaved"] == 1
    assert (telemetry["recordings"], telemetry["replays"]) == (1, 1)
    assert evaluated.retired is None  # one call, not the recorder


@pytest.mark.parametrize(("deferred", "in_pool"), [(0, False), (2, True)])
def test_forward_recorder_held_back_runs_native_and_then_warms_up_in_the_pool(
    deferred: int, in_pool: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # with no native call before it, a recording warms up beside the pool; after calls held
    # back by defer_recording, in the pool's free scratch (the gpu test reads the memory)
    asked: list[bool] = []
    warm_up = ReplayPool.warm_up

    def noting(self: ReplayPool, *, into_pool: bool) -> Any:
        asked.append(into_pool)
        return warm_up(self, into_pool=into_pool)

    monkeypatch.setattr(ReplayPool, "warm_up", noting)
    net = make_net().eval()
    recorder = ForwardRecorder(ModuleRegion(net), warmup_steps=0)
    with torch.inference_mode():
        recorder.defer_recording = True
        for seed in range(deferred):
            assert _bits(recorder(_images(seed))) == _bits(net(_images(seed)))
        assert recorder.recordings == 0
        recorder.defer_recording = False
        for seed in range(deferred, deferred + 2):
            assert _bits(recorder(_images(seed))) == _bits(net(_images(seed)))
    telemetry = recorder.telemetry.as_dict()
    assert telemetry.get("native.warm-up", 0) == deferred
    assert (telemetry["recordings"], telemetry["replays"]) == (1, 2)
    assert asked == [in_pool]


def test_forward_recorder_rejects_bad_settings() -> None:
    region = ModuleRegion(make_net())
    with pytest.raises(ReplayConfigError, match="warmup_steps"):
        ForwardRecorder(region, warmup_steps=-1)
    with pytest.raises(ReplayConfigError, match="capture_warmup"):
        ForwardRecorder(region, capture_warmup=0)
    with pytest.raises(ReplayConfigError, match="max_signatures"):
        ForwardRecorder(region, max_signatures=0)


class _Unsafe(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x[x > 0]  # a data-dependent shape: the capture cannot hold it


def test_forward_recorder_runs_a_signature_native_when_its_capture_fails() -> None:
    recorder = ForwardRecorder(ModuleRegion(_Unsafe()), warmup_steps=0)
    with torch.inference_mode(), pytest.warns(ReplayRetiredWarning, match="capture-failed"):
        first = recorder(_images(0))
    with torch.inference_mode():
        second = recorder(_images(0))
    assert torch.equal(first, second)
    telemetry = recorder.telemetry.as_dict()
    assert telemetry["retired.capture-failed"] == 1
    assert telemetry["native.retired-signature"] == 2


# ---------------------------------------------------------------------------------------- CUDA


def _cuda_eval_net() -> nn.Module:
    net = make_net("cuda", channels=32).eval()
    return net


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_gpu_forward_recorder_is_the_eager_forward_bit_for_bit(
    dtype: torch.dtype | None, deterministic: None
) -> None:
    net = _cuda_eval_net()
    recorder = ForwardRecorder(ModuleRegion(net))
    enabled = dtype is not None
    with torch.inference_mode(), torch.autocast("cuda", dtype=dtype, enabled=enabled):
        for seed in range(4):
            images = _images(seed, batch=8, size=64, device="cuda")
            replayed = _bits(recorder(images))
            assert replayed == _bits(net(images))
    assert recorder.telemetry.replays == 3


@pytest.mark.gpu
@pytest.mark.parametrize("held_back", [False, True])
def test_gpu_forward_recorder_in_a_training_step_pool_takes_its_scratch(
    held_back: bool, deterministic: None
) -> None:
    # the step's graphs hold the pool: after a native call (a warm-up call, or one held back
    # by defer_recording, as a fit's sanity check is), the evaluation graph's warm-up and
    # capture reuse their free scratch instead of reserving beside it (a whole fit's bits with
    # the evaluation in the step's pool: tests/train/replay/test_parity.py)
    _, pool = recorded_small_net("cuda")
    evaluated_net = make_net("cuda", seed=3, channels=32).eval()
    evaluated = ForwardRecorder(
        ModuleRegion(evaluated_net), pool=pool, warmup_steps=0 if held_back else 1
    )
    batches = [_images(seed, batch=8, size=128, device="cuda") for seed in range(3)]
    with torch.inference_mode():
        expected = [_bits(evaluated_net(images)) for images in batches]
        evaluated.defer_recording = held_back
        assert _bits(evaluated(batches[0])) == expected[0]  # the native call
        evaluated.defer_recording = False
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_reserved()
    pool_before = pool.pool_bytes()
    with torch.inference_mode():
        for images, bits in zip(batches, expected, strict=True):
            outputs = evaluated(images)
            assert _bits(outputs) == bits
    torch.cuda.synchronize()
    telemetry = evaluated.telemetry.as_dict()
    assert (telemetry["recordings"], telemetry["replays"]) == (1, 3)
    # the pool grows by the graph's live outputs at most (in 2 MiB segments), not by a forward's
    # activations; at no moment is more reserved beside it than the static input
    assert isinstance(outputs, dict)
    output_bytes = sum(o.numel() * o.element_size() for o in outputs.values())
    segment = 2 * 2**20
    grown = pool.pool_bytes() - pool_before
    assert grown <= -(-output_bytes // segment) * segment, (grown, output_bytes)
    assert torch.cuda.max_memory_reserved() - before <= grown + segment


@pytest.mark.gpu
def test_gpu_forward_recorder_recorded_in_inference_mode_hands_ordinary_tensors() -> None:
    # validation records under inference mode; a later call under no_grad may write its outputs
    net = _cuda_eval_net()
    recorder = ForwardRecorder(ModuleRegion(net), warmup_steps=0)
    images = _images(0, batch=2, size=32, device="cuda")
    with torch.inference_mode():
        recorder(images)
    with torch.no_grad():
        outputs = recorder(images)
        assert isinstance(outputs, dict)
        assert not outputs["a.box"].is_inference()
        outputs["a.box"].add_(1.0)


@pytest.mark.gpu
def test_gpu_forward_recorder_raises_when_its_warm_up_keeps_a_block_of_the_pool() -> None:
    class Caching(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 1)
            self.cache: list[Tensor] = []

        def forward(self, x: Tensor) -> Tensor:
            y = self.conv(x)
            self.cache.append(y * 2)
            return y

    _, pool = recorded_small_net("cuda")
    recorder = ForwardRecorder(ModuleRegion(Caching().cuda()), pool=pool)
    images = _images(0, device="cuda")
    with torch.inference_mode():
        recorder(images)  # native: its kept block is outside the pool
        with pytest.raises(PoolLeakError, match="warm-up"):
            recorder(images)  # the warm-up in the pool's scratch keeps one more
