"""CPU tests of update replay: the optimizer step recorded, keyed and retired.

The comparisons with native run on the CPU stand-in, which re-runs each recorded body eagerly: both
sides execute the same kernels, so they pin the bookkeeping (the hyperparameter key, state snapshots
around the capture, retirements) and nothing about CUDA graph kernels;
``tests/replay/test_gpu_parity.py`` compares real graphs.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from lucid_yolo.replay import (
    GraphedOptimizer,
    ReplayConfigError,
    ReplayPool,
    ReplayRetiredWarning,
    RetireReason,
    ScratchLoan,
    UpdateRecorder,
    first_difference,
    state_digest,
)
from lucid_yolo.replay.update import hyperparameter_key


def _pair() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    return net, copy.deepcopy(net)


def _sgd(net: nn.Module) -> torch.optim.SGD:
    return torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)


def _train(net: nn.Module, optimizer: torch.optim.SGD | GraphedOptimizer, steps: int) -> None:
    gen = torch.Generator().manual_seed(3)
    for _ in range(steps):
        net(torch.randn(6, 4, generator=gen)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()


def test_graphed_optimizer_matches_native_sgd() -> None:
    native, replayed = _pair()
    native_opt, graphed = _sgd(native), GraphedOptimizer(_sgd(replayed))
    _train(native, native_opt, 4)
    _train(replayed, graphed, 4)
    assert (
        first_difference(state_digest([native, native_opt]), state_digest([replayed, graphed]))
        is None
    )
    assert graphed.telemetry.as_dict()["replays"] == 3


def test_graphed_optimizer_custom_update_records_extra_state() -> None:
    native, replayed = _pair()
    native_opt, replayed_opt = _sgd(native), _sgd(replayed)
    native_avg = [p.detach().clone() for p in native.parameters()]
    replayed_avg = [p.detach().clone() for p in replayed.parameters()]

    def blend(net: nn.Module, average: list[torch.Tensor]) -> None:
        torch._foreach_lerp_(average, [p.detach() for p in net.parameters()], 0.5)

    graphed = GraphedOptimizer(
        replayed_opt,
        update=lambda: (replayed_opt.step(), blend(replayed, replayed_avg)),
        extra_state=lambda: replayed_avg,
    )
    gen = torch.Generator().manual_seed(3)
    for _ in range(4):
        batch = torch.randn(6, 4, generator=gen)
        for net, step in ((native, None), (replayed, graphed)):
            net(batch).square().mean().backward()
            if step is None:
                native_opt.step()
                blend(native, native_avg)
                native_opt.zero_grad()
            else:
                step.step()
                step.zero_grad()
    assert first_difference(state_digest(native_avg), state_digest(replayed_avg)) is None
    assert first_difference(state_digest(native), state_digest(replayed)) is None
    assert graphed.telemetry.replays == 3
    assert any(t is replayed_avg[0] for t in graphed._state_tensors())


def test_graphed_optimizer_reads_gradients_copied_in_each_step() -> None:
    _, net = _pair()
    graphed = GraphedOptimizer(_sgd(net), warmup_steps=0)
    _train(net, graphed, 1)
    static = next(iter(graphed._static_grads.values()))
    assert all(s.data_ptr() != p.data_ptr() for s, p in zip(static, net.parameters(), strict=True))


@pytest.mark.parametrize("writes_gradients", [True, False])
def test_graphed_optimizer_gives_back_gradients_its_update_changed(writes_gradients: bool) -> None:
    native, replayed = _pair()
    native_opt, replayed_opt = _sgd(native), _sgd(replayed)

    def halve_then_step(net: nn.Module, optimizer: torch.optim.SGD) -> None:
        torch._foreach_mul_([p.grad for p in net.parameters() if p.grad is not None], 0.5)
        optimizer.step()

    graphed = GraphedOptimizer(
        replayed_opt,
        update=lambda: halve_then_step(replayed, replayed_opt),
        writes_gradients=writes_gradients,
    )
    gen = torch.Generator().manual_seed(3)
    for _ in range(3):  # warm-up, recording, replay
        batch = torch.randn(6, 4, generator=gen)
        for net in (native, replayed):
            for p in net.parameters():
                p.grad = None
            net(batch).square().mean().backward()
        halve_then_step(native, native_opt)
        graphed.step()
    assert graphed.telemetry.replays == 2
    grads_equal = [
        torch.equal(n.grad, r.grad)
        for n, r in zip(native.parameters(), replayed.parameters(), strict=True)
    ]
    assert all(grads_equal) is writes_gradients
    assert first_difference(state_digest(native), state_digest(replayed)) is None


def test_graphed_optimizer_new_key_when_gradients_missing() -> None:
    _, net = _pair()
    graphed = GraphedOptimizer(_sgd(net), warmup_steps=0)
    _train(net, graphed, 1)
    net[2].weight.requires_grad_(False)
    _train(net, graphed, 1)
    assert graphed.telemetry.recordings == 2


def test_graphed_optimizer_new_key_when_a_gradient_changes_layout() -> None:
    _, net = _pair()
    graphed = GraphedOptimizer(_sgd(net), warmup_steps=0)
    _train(net, graphed, 1)
    weight = net[2].weight
    weight.grad = torch.ones(weight.shape[::-1]).t()  # same shape, transposed strides
    graphed.step()
    assert graphed.telemetry.recordings == 2
    assert graphed.telemetry.recorded["gradients"] == 1


def test_graphed_optimizer_new_key_when_a_gradient_is_set_to_none() -> None:
    _, net = _pair()
    graphed = GraphedOptimizer(_sgd(net), warmup_steps=0)
    net(torch.randn(6, 4)).square().mean().backward()
    graphed.step()
    net[0].bias.grad = None
    graphed.step()
    assert graphed.telemetry.recordings == 2


def test_graphed_optimizer_new_key_for_a_new_param_group() -> None:
    _, net = _pair()
    optimizer = torch.optim.SGD(list(net[0].parameters()), lr=0.1, momentum=0.9)
    graphed = GraphedOptimizer(optimizer, warmup_steps=0)
    _train(net, graphed, 1)
    optimizer.add_param_group({"params": list(net[2].parameters())})
    _train(net, graphed, 1)
    assert graphed.telemetry.recordings == 2
    assert graphed.telemetry.recorded["parameters+gradients+hyperparameters"] == 1


def test_graphed_optimizer_new_key_when_a_parameter_is_replaced_in_its_group() -> None:
    _, net = _pair()
    optimizer = _sgd(net)
    graphed = GraphedOptimizer(optimizer, warmup_steps=0)
    _train(net, graphed, 1)
    replacement = nn.Parameter(net[2].weight.detach().clone())
    net[2].weight = replacement
    optimizer.param_groups[0]["params"][4] = replacement
    _train(net, graphed, 1)
    assert graphed.telemetry.recordings == 2
    assert graphed.telemetry.recorded["parameters"] == 1


def test_graphed_optimizer_new_key_when_a_parameter_gets_new_storage() -> None:
    _, net = _pair()
    graphed = GraphedOptimizer(_sgd(net), warmup_steps=0)
    _train(net, graphed, 1)
    net[0].weight.data = net[0].weight.detach().clone()
    _train(net, graphed, 1)
    assert graphed.telemetry.recorded["parameters"] == 1


def test_graphed_optimizer_new_key_after_the_optimizer_state_is_loaded() -> None:
    # torch's load_state_dict fills a new state dict with new momentum buffers: a graph recorded
    # before would keep updating the old ones.
    native, net = _pair()
    native_opt, optimizer = _sgd(native), _sgd(net)
    graphed = GraphedOptimizer(optimizer)
    for restore in (False, True):
        if restore:
            optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))
            native_opt.load_state_dict(copy.deepcopy(native_opt.state_dict()))
        _train(native, native_opt, 3)
        _train(net, graphed, 3)
    assert graphed.telemetry.recorded["state"] == 1
    native_state, replayed_state = state_digest([native, native_opt]), state_digest([net, graphed])
    assert first_difference(native_state, replayed_state) is None


class _TupleHyperparameter(torch.optim.Optimizer):
    """Reads a tuple hyperparameter as Adam reads ``betas`` (CPU Adam itself syncs on its step)."""

    def __init__(self, params: object) -> None:
        super().__init__(params, {"betas": (0.9, 0.999)})  # type: ignore[arg-type]

    @torch.no_grad()
    def step(self) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.sub_(p.grad * (1.0 - group["betas"][0]))


def test_graphed_optimizer_records_again_when_tuple_hyperparameter_changes() -> None:
    _, net = _pair()
    optimizer = _TupleHyperparameter(net.parameters())
    graphed = GraphedOptimizer(optimizer, warmup_steps=0)
    _train(net, graphed, 1)
    optimizer.param_groups[0]["betas"] = (0.85, 0.999)
    _train(net, graphed, 1)
    assert graphed.telemetry.recordings == 2


def test_hyperparameter_key_reads_a_cpu_tensor_of_a_cuda_update_by_value() -> None:
    lr = torch.tensor(0.1)
    before = hyperparameter_key(lr, torch.device("cuda"))
    lr.fill_(0.2)
    assert hyperparameter_key(lr, torch.device("cuda")) != before


def test_hyperparameter_key_reads_a_device_tensor_by_identity() -> None:
    lr = torch.tensor(0.1)
    before = hyperparameter_key(lr, torch.device("cpu"))
    lr.fill_(0.2)
    assert hyperparameter_key(lr, torch.device("cpu")) == before
    assert hyperparameter_key(torch.tensor(0.2), torch.device("cpu")) != before


def test_graphed_optimizer_float_lr_schedule_hits_signature_limit() -> None:
    _, net = _pair()
    optimizer = _sgd(net)
    graphed = GraphedOptimizer(optimizer, warmup_steps=0, max_signatures=1)
    _train(net, graphed, 1)
    optimizer.param_groups[0]["lr"] = 0.05
    with pytest.warns(ReplayRetiredWarning, match="signature-limit.*device tensor"):
        _train(net, graphed, 1)
    assert graphed.telemetry.native_calls["retired-signature"] == 1


def test_graphed_optimizer_capture_failure_restores_state() -> None:
    native, replayed = _pair()

    def adam(net: nn.Module) -> torch.optim.Adam:
        return torch.optim.Adam(net.parameters(), lr=0.01, foreach=True)

    native_opt, graphed = adam(native), GraphedOptimizer(adam(replayed))
    _train(native, native_opt, 3)
    with pytest.warns(ReplayRetiredWarning, match=r"capture-failed.*_local_scalar_dense"):
        _train(replayed, graphed, 3)
    assert (
        first_difference(state_digest([native, native_opt]), state_digest([replayed, graphed]))
        is None
    )
    assert graphed.telemetry.retirements[RetireReason.CAPTURE_FAILED] == 1


def test_graphed_optimizer_zero_grad_keeps_tensors_when_asked() -> None:
    _, net = _pair()
    graphed = GraphedOptimizer(_sgd(net))
    net(torch.randn(6, 4)).sum().backward()
    grad = net[0].weight.grad
    graphed.zero_grad(set_to_none=False)
    assert net[0].weight.grad is grad
    assert not grad.any()


def test_graphed_optimizer_works_with_gradscaler_interface() -> None:
    native, replayed = _pair()
    native_opt, graphed = _sgd(native), GraphedOptimizer(_sgd(replayed))
    scalers = (
        torch.amp.GradScaler("cpu", init_scale=4.0),
        torch.amp.GradScaler("cpu", init_scale=4.0),
    )
    for net, opt, scaler in ((native, native_opt, scalers[0]), (replayed, graphed, scalers[1])):
        gen = torch.Generator().manual_seed(3)
        for _ in range(3):
            scaler.scale(net(torch.randn(6, 4, generator=gen)).square().mean()).backward()
            scaler.step(opt)  # type: ignore[arg-type]
            scaler.update()
            opt.zero_grad()
    expected = state_digest([native, native_opt, scalers[0]])
    assert first_difference(expected, state_digest([replayed, graphed, scalers[1]])) is None


def test_update_recorder_disabled_runs_native() -> None:
    calls = []
    recorder = UpdateRecorder(lambda: calls.append(1), state=list, enabled=False)
    recorder()
    assert calls == [1]
    assert recorder.telemetry.native_calls["disabled"] == 1


def test_update_recorder_retired_runs_native() -> None:
    t = torch.zeros(1)
    recorder = UpdateRecorder(lambda: t.add_(1), state=lambda: [t], warmup_steps=0)
    with pytest.warns(ReplayRetiredWarning, match="parity-mismatch"):
        recorder.retire(RetireReason.PARITY_MISMATCH, "test")
    recorder()
    assert recorder.telemetry.native_calls["retired"] == 1
    assert t.item() == 1


def test_update_recorder_runs_native_while_its_pool_is_lent() -> None:
    t = torch.zeros(1)
    pool = ReplayPool("cpu")
    recorder = UpdateRecorder(lambda: t.add_(1), state=lambda: [t], warmup_steps=0, pool=pool)
    recorder()
    loan = ScratchLoan(pool)
    loan.open()
    recorder()
    loan.close()
    recorder()
    assert recorder.telemetry.native_calls["pool-lent"] == 1
    assert (recorder.telemetry.recordings, recorder.telemetry.replays) == (1, 2)
    assert t.item() == 3


def test_update_recorder_capture_check_leaves_no_trace() -> None:
    t = torch.zeros(1)
    recorder = UpdateRecorder(lambda: t.add_(1), state=lambda: [t], warmup_steps=0)
    recorder()
    assert t.item() == 1
    assert recorder.telemetry.recordings == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"warmup_steps": -1}, "warmup_steps=-1"), ({"max_signatures": 0}, "max_signatures=0")],
)
def test_update_recorder_rejects_bad_arguments(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ReplayConfigError, match=message):
        UpdateRecorder(lambda: None, state=list, **kwargs)  # type: ignore[arg-type]
