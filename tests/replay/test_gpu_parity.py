"""GPU parity: native vs replayed training steps, compared bitwise by byte digests.

Run on a CUDA machine with ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (set by ``make test-gpu``'s
caller): ``python -m pytest -m gpu tests/replay``. Every test trains a conv/BatchNorm/dropout net
whose outputs feed a native loss, twice from the same seed, and compares weights, buffers,
gradients, optimizer/scaler/scheduler/EMA state and losses (docs/replay-invariants.md,
invariant 21).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from replay_nets import SmallNet, loss_of, make_net, recorded_small_net, side_stream_segments
from torch import Tensor, nn

from lucid_yolo.replay import (
    ModuleRegion,
    RegionRecorder,
    ReplayPool,
    ReplayRetiredWarning,
    ReplayStep,
    first_difference,
    grads_of,
    state_digest,
)
from lucid_yolo.replay.ema import ModelEMA
from lucid_yolo.replay.update import GraphedOptimizer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.usefixtures("deterministic"),
]

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


class NewtonSchulzMomentum(torch.optim.Optimizer):
    """A custom, capturable optimizer: momentum orthogonalised by Newton–Schulz for matrices.

    State is created in ``__init__`` and the learning rate is a device tensor, so ``step()`` is
    a fixed sequence of device ops (the UpdateOptimizer protocol's requirements).
    """

    def __init__(self, params: Any, lr: Tensor, momentum: float = 0.9) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum})
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["momentum_buffer"] = torch.zeros_like(p)

    @torch.no_grad()
    def step(self) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p]["momentum_buffer"]
                buf.mul_(group["momentum"]).add_(p.grad)
                update = _orthogonalise(buf) if p.ndim >= 2 else buf
                p.sub_(update * group["lr"])


def _orthogonalise(m: Tensor) -> Tensor:
    x = m.reshape(m.shape[0], -1)
    x = x / (x.norm() + 1e-7)
    for _ in range(3):
        a = x @ x.T
        x = 3.4445 * x + (-4.7750 * a + 2.0315 * a @ a) @ x
    return x.reshape(m.shape)


@dataclass
class Setup:
    """One training run's configuration."""

    accumulation: tuple[int, ...] = (1, 1, 1, 1)
    precision: str = "fp32"
    optimizer: str = "sgd-plain"
    graph_update: bool = False
    ema: bool = False
    shared_twice: bool = False
    inf_step: int | None = None
    scheduler: bool = False
    autocast_cache: bool = True
    cycled_betas: bool = False
    direct_gradients: bool = False


def _optimizer(kind: str, net: nn.Module) -> torch.optim.Optimizer:
    lr = torch.tensor(0.02, device="cuda")
    if kind == "sgd-plain":
        return torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9, weight_decay=5e-4)
    if kind == "sgd":
        return torch.optim.SGD(
            net.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4, fused=True
        )
    if kind == "adamw":
        return torch.optim.AdamW(net.parameters(), lr=lr, capturable=True, foreach=True)
    return NewtonSchulzMomentum(net.parameters(), lr=lr)


def _train(setup: Setup, replay: bool) -> dict[str, str]:
    net = make_net("cuda", shared_twice=setup.shared_twice)
    forward: Callable[[Tensor], dict[str, Tensor]] = (
        RegionRecorder(ModuleRegion(net), direct_gradients=setup.direct_gradients)
        if replay
        else net  # type: ignore[assignment]
    )
    optimizer = _optimizer(setup.optimizer, net)
    stepper: Any = GraphedOptimizer(optimizer) if replay and setup.graph_update else optimizer
    scheduler = (
        torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1.0 + s))
        if setup.scheduler
        else None
    )
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**12) if setup.precision == "fp16" else None
    ema = ModelEMA(net, tau=3.0, graphed=replay) if setup.ema else None
    gen = torch.Generator(device="cuda").manual_seed(0)
    losses = []
    for step, accumulation in enumerate(setup.accumulation):
        for micro in range(accumulation):
            x = torch.randn(4, 3, 16, 16, device="cuda", generator=gen)
            target = torch.randn(4, 4, 16, 16, device="cuda", generator=gen)
            torch.manual_seed(1000 + 10 * step + micro)
            with _autocast(setup.precision, setup.autocast_cache):
                loss = loss_of(forward(x), target) / accumulation
            if setup.inf_step == step:
                loss = loss * math.inf
            (scaler.scale(loss) if scaler is not None else loss).backward()
            losses.append(loss.detach())
        grads = {k: None if g is None else g.clone() for k, g in grads_of(net).items()}
        if scaler is not None:
            scaler.step(stepper)
            scaler.update()
        else:
            stepper.step()
        stepper.zero_grad()
        if setup.cycled_betas:
            # What OneCycleLR and CyclicLR do to Adam's betas: a tuple rewritten every step.
            for group in optimizer.param_groups:
                group["betas"] = (0.85 if step % 2 == 0 else 0.9, 0.999)
        if scheduler is not None:
            scheduler.step()
        if ema is not None:
            ema.update()
    torch.cuda.synchronize()
    return state_digest(
        {
            "net": net,
            "grads": grads,
            "optimizer": optimizer,
            "scaler": scaler,
            "scheduler": scheduler,
            "ema": ema,
            "losses": losses,
        }
    )


@contextlib.contextmanager
def _autocast(precision: str, cache: bool = True) -> Iterator[None]:
    if precision == "fp32":
        yield
        return
    with torch.autocast("cuda", dtype=DTYPES[precision], cache_enabled=cache):
        yield


def _assert_parity(setup: Setup) -> None:
    expected = _train(setup, replay=False)
    got = _train(setup, replay=True)
    assert first_difference(expected, got) is None


@pytest.mark.parametrize("accumulation", [1, 2, 3])
def test_gpu_fp32_matches_native(accumulation: int) -> None:
    _assert_parity(Setup(accumulation=(accumulation,) * 4))


def test_gpu_fp16_gradscaler_with_inf_step_matches_native() -> None:
    _assert_parity(Setup(accumulation=(2, 2, 2, 2), precision="fp16", inf_step=1))


def test_gpu_bf16_matches_native() -> None:
    _assert_parity(Setup(accumulation=(2, 2, 2, 2), precision="bf16"))


def test_gpu_accumulation_change_after_recording_matches_native() -> None:
    _assert_parity(Setup(accumulation=(2, 2, 3, 1, 3)))


@pytest.mark.parametrize(
    "setup",
    [
        Setup(accumulation=(1, 1, 1, 1), direct_gradients=True),
        Setup(
            accumulation=(2, 2, 3, 1, 3),
            precision="bf16",
            graph_update=True,
            direct_gradients=True,
        ),
        Setup(accumulation=(2, 2, 2, 2), precision="fp16", inf_step=1, direct_gradients=True),
        Setup(accumulation=(2, 2, 2), precision="bf16", shared_twice=True, direct_gradients=True),
    ],
    ids=["fp32", "bf16-accumulation-change-graphed-update", "fp16-inf-step", "bf16-shared-twice"],
)
def test_gpu_direct_gradients_match_native(setup: Setup) -> None:
    _assert_parity(setup)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_gpu_parameter_used_twice_matches_native(precision: str) -> None:
    _assert_parity(Setup(accumulation=(2, 2, 2), precision=precision, shared_twice=True))


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_gpu_parameter_used_twice_without_autocast_cache_matches_native(precision: str) -> None:
    _assert_parity(
        Setup(accumulation=(2, 2, 2), precision=precision, shared_twice=True, autocast_cache=False)
    )


def test_gpu_update_replay_adamw_with_cycled_betas_matches_native() -> None:
    _assert_parity(Setup(optimizer="adamw", graph_update=True, cycled_betas=True))


def test_gpu_update_replay_sgd_matches_native() -> None:
    _assert_parity(Setup(optimizer="sgd", graph_update=True, scheduler=True))


def test_gpu_update_replay_adamw_matches_native() -> None:
    _assert_parity(Setup(optimizer="adamw", graph_update=True, scheduler=True))


def test_gpu_update_replay_custom_optimizer_matches_native() -> None:
    _assert_parity(Setup(optimizer="newton-schulz", graph_update=True, scheduler=True))


def test_gpu_update_replay_with_gradscaler_matches_native() -> None:
    _assert_parity(
        Setup(
            accumulation=(2, 2, 2, 2),
            precision="fp16",
            optimizer="adamw",
            graph_update=True,
            inf_step=2,
        )
    )


def test_gpu_ema_replay_matches_native() -> None:
    _assert_parity(Setup(optimizer="adamw", graph_update=True, ema=True))


class _Tail(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x: Tensor) -> Tensor:
        return self.bn(self.conv(x))


def _train_chained(replay: bool) -> dict[str, str]:
    torch.manual_seed(0)
    head, tail = SmallNet().cuda(), _Tail().cuda()
    first: Callable[[Tensor], dict[str, Tensor]] = head
    second: Callable[[Tensor], Tensor] = tail
    if replay:
        pool = ReplayPool("cuda")
        first = RegionRecorder(ModuleRegion(head), pool=pool, name="head")  # type: ignore[assignment]
        second = RegionRecorder(ModuleRegion(tail), pool=pool, name="tail")  # type: ignore[assignment]
    optimizer = torch.optim.SGD([*head.parameters(), *tail.parameters()], lr=0.02, momentum=0.9)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for step in range(4):
        for micro in range(2):
            x = torch.randn(4, 3, 16, 16, device="cuda", generator=gen)
            torch.manual_seed(100 * step + micro)
            second(first(x)["a.box"]).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    torch.cuda.synchronize()
    return state_digest([head, tail, optimizer])


def test_gpu_chained_regions_sharing_pool_match_native() -> None:
    assert first_difference(_train_chained(False), _train_chained(True)) is None


class _Syncs(SmallNet):
    def forward(self, x: Tensor) -> dict[str, Tensor]:
        out = super().forward(x)
        return {k: v * float(v.detach().abs().max() > 0) for k, v in out.items()}


def test_gpu_capture_failure_leaves_state_untouched() -> None:
    torch.manual_seed(0)
    native = _Syncs().cuda()
    torch.manual_seed(0)
    replayed = _Syncs().cuda()
    recorder = RegionRecorder(ModuleRegion(replayed), warmup_steps=0)
    x = torch.randn(4, 3, 16, 16, device="cuda")
    torch.manual_seed(1)
    native(x)["a.box"].sum().backward()
    torch.manual_seed(1)
    with pytest.warns(ReplayRetiredWarning, match="capture-failed.*_local_scalar_dense"):
        recorder(x)["a.box"].sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.manual_seed(2)
        native(x)["a.box"].sum().backward()
        torch.manual_seed(2)
        recorder(x)["a.box"].sum().backward()
    torch.cuda.synchronize()
    expected = state_digest([native, grads_of(native)])
    got = state_digest([replayed, grads_of(replayed)])
    assert first_difference(expected, got) is None


def _step_digest(replay: bool, precision: str) -> tuple[dict[str, str], dict[str, int]]:
    net = make_net("cuda")
    lr = torch.tensor(1e-3, device="cuda")
    optimizer = torch.optim.AdamW(net.parameters(), lr=lr, capturable=True, foreach=True)
    ema = ModelEMA(net, tau=3.0, graphed=replay)
    step = ReplayStep(
        net,
        loss_of,
        optimizer,
        accumulation=2,
        precision=precision,
        ema=ema,
        graph_update=replay,
        verify_every=2 if replay else 0,
        enabled=replay,
    )
    gen = torch.Generator(device="cuda").manual_seed(0)
    torch.manual_seed(0)
    for _ in range(12):
        x = torch.randn(4, 3, 16, 16, device="cuda", generator=gen)
        step(x, torch.randn(4, 4, 16, 16, device="cuda", generator=gen))
    torch.cuda.synchronize()
    digest = state_digest([net, grads_of(net), optimizer, step.scaler, ema])
    return digest, step.telemetry.as_dict()


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_gpu_replay_step_with_verifier_matches_native(precision: str) -> None:
    expected, _ = _step_digest(False, precision)
    got, telemetry = _step_digest(True, precision)
    assert first_difference(expected, got) is None
    assert telemetry["verified"] == 2
    assert telemetry["parity_mismatches"] == 0
    assert telemetry["recordings"] >= 2
    assert telemetry["pool_bytes"] > 0


def _train_partial_group(replay: bool) -> dict[str, str]:
    net = make_net("cuda")
    region: Callable[[Tensor], dict[str, Tensor]] = net
    if replay:
        groups = {"heads": ["a.box", "b.box"]}
        region = RegionRecorder(ModuleRegion(net, groups))  # type: ignore[assignment]
    optimizer = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9, weight_decay=5e-4)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for step in range(4):
        x = torch.randn(4, 3, 16, 16, device="cuda", generator=gen)
        torch.manual_seed(step)
        region(x)["a.box"].square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    torch.cuda.synchronize()
    return state_digest([net, optimizer])


def test_gpu_group_used_in_part_matches_native() -> None:
    # head_b feeds only the unused b.box: eager leaves its .grad None, so SGD's weight decay
    # and momentum must not move it in the replay either.
    assert first_difference(_train_partial_group(False), _train_partial_group(True)) is None


class _Float32Product(nn.Module):
    """A float32 matrix product computed with autocast off, as the segment loss assembles masks."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.weight = nn.Parameter(torch.randn(64, 48, generator=generator).cuda())

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        with torch.autocast("cuda", enabled=False):
            return {"out": x.float() @ self.weight}


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_gpu_float32_product_under_autocast_matches_native(precision: str) -> None:
    # Called under autocast, backward started after leaving it: the recorded backward must not
    # run the product's bmm/mm under autocast (the segment loss-replay difference).
    def run(replay: bool) -> dict[str, str]:
        net = _Float32Product()
        forward: Any = RegionRecorder(ModuleRegion(net)) if replay else net
        gen = torch.Generator(device="cuda").manual_seed(0)
        grads = []
        for _ in range(3):
            net.zero_grad(set_to_none=True)
            x = torch.randn(32, 64, device="cuda", generator=gen).requires_grad_(True)
            with _autocast(precision):
                out = forward(x)["out"]
            out.square().mean().backward()
            grads += [net.weight.grad.clone(), x.grad.clone()]  # type: ignore[union-attr]
        if replay:
            assert forward.telemetry.replays == 2
        return state_digest(grads)

    assert first_difference(run(False), run(True)) is None


@pytest.mark.xfail(
    strict=False,
    reason="machine-dependent: failed on the H200 (7 entirely free 40 MiB side-stream segments "
    "at 06:17, 9 at 07:10 on 2026-12-01), passed on an H100 on 2026-12-05: some warm-up blocks "
    "can be freed after the release before capture, cause not established; in a fit the next "
    "recording's release returns them (docs/engineering/replay-memory.md, session 5)",
)
def test_gpu_recording_leaves_no_free_segment_on_the_side_stream() -> None:
    """The warm-up's blocks, cached on the side stream, no default-stream step could reuse."""
    recorder, pool = recorded_small_net("cuda")
    torch.cuda.synchronize()
    assert recorder.telemetry.recordings == 1
    assert recorder.telemetry.replays == 2
    free_side_segments = [s for s in side_stream_segments(pool) if s["allocated_size"] == 0]
    assert free_side_segments == []
