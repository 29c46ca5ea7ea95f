"""MuSGD against a per-parameter reference, graph-safety properties and state round-trips.

MuSGD orthogonalises zero-padded stacks (``shape_buckets``), which changes the rounding of the
Newton–Schulz products but not their math: the reference comparisons with the Muon term run in
float64 with a float64 tolerance; without the Muon term (momentum, weight decay and the SGD side
of the blend) MuSGD still equals the reference bit for bit in float32.
"""

import copy
import io
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from lucid_yolo.train.optim import (
    HYPERPARAMETERS,
    MuSGD,
    OptimizerConfigError,
    OptimizerStateError,
    param_groups,
)
from lucid_yolo.train.optim import shape_buckets as shape_buckets_module

Backward = Callable[[nn.Module, int], None]

_A, _B, _C = 3.4445, -4.7750, 2.0315


def _reference_orthogonalise(g: Tensor) -> Tensor:
    """Newton–Schulz on one 2-D matrix, written out without batching."""
    x = g / (torch.linalg.vector_norm(g) + 1e-7)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    for _ in range(5):
        gram = x @ x.T
        poly = _B * gram + _C * (gram @ gram)
        x = _A * x + poly @ x
    return x.T if tall else x


class _ReferenceMuSGD:
    """Straightforward per-parameter MuSGD: a loop, one tensor at a time, fp32 0-dim hypers."""

    def __init__(self, groups: list[dict[str, Any]], **defaults: float) -> None:
        self.groups = [{**defaults, **g} for g in groups]
        self.buffers = {id(p): torch.zeros_like(p) for g in groups for p in g["params"]}

    @torch.no_grad()
    def step(self, nesterov: bool = True) -> None:
        for group in self.groups:
            f32 = {k: torch.tensor(float(group[k])) for k in HYPERPARAMETERS}
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.buffers[id(p)]
                buf.mul_(f32["momentum"])
                buf.add_(p.grad)
                d = buf * f32["momentum"] + p.grad if nesterov else buf
                if p.ndim >= 2:
                    rows, cols = p.shape[0], p.numel() // p.shape[0]
                    scale = torch.tensor(max(1.0, rows / cols) ** 0.5, dtype=p.dtype)
                    o = _reference_orthogonalise(d.reshape(rows, cols)) * scale
                    u = o.reshape(p.shape) * f32["muon_weight"] + d * f32["sgd_weight"]
                else:
                    u = d
                p.mul_(1.0 - f32["lr"] * f32["weight_decay"])
                p.sub_(u * f32["lr"])


_HYPERS = {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01, "muon_weight": 0.7, "sgd_weight": 0.4}


def _bit_equal(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def _float64_equal(a: nn.Module, b: nn.Module) -> bool:
    """Equal to float64 rounding: what padding the Newton–Schulz stacks may change."""
    return all(
        torch.allclose(x, y, rtol=0.0, atol=1e-12)
        for x, y in zip(a.parameters(), b.parameters(), strict=True)
    )


@pytest.mark.parametrize("nesterov", [True, False])
def test_musgd_matches_reference_in_float64_over_steps(
    net: nn.Module, backward: Backward, nesterov: bool
) -> None:
    net.double()
    initial = copy.deepcopy(net)
    ref_net = copy.deepcopy(net)
    opt = MuSGD(
        param_groups(net, weight_decay=0.01), nesterov=nesterov, ns_dtype=torch.float64, **_HYPERS
    )
    ref = _ReferenceMuSGD(param_groups(ref_net, weight_decay=0.01), **_HYPERS)
    for step in range(4):
        for model in (net, ref_net):
            model.zero_grad()
            backward(model, step)
        opt.step()
        ref.step(nesterov=nesterov)
    assert _float64_equal(net, ref_net)
    changed = [
        not torch.equal(a, b)
        for a, b in zip(net.parameters(), initial.parameters(), strict=True)
        if a.ndim >= 2
    ]
    assert all(changed)


def test_musgd_without_muon_term_matches_reference_bitwise(
    net: nn.Module, backward: Backward
) -> None:
    hypers = {**_HYPERS, "muon_weight": 0.0}
    ref_net = copy.deepcopy(net)
    opt = MuSGD(param_groups(net, weight_decay=0.01), **hypers)
    ref = _ReferenceMuSGD(param_groups(ref_net, weight_decay=0.01), **hypers)
    for step in range(3):
        for model in (net, ref_net):
            model.zero_grad()
            backward(model, step)
        opt.step()
        ref.step()
    assert _bit_equal(net, ref_net)
    for p, q in zip(net.parameters(), ref_net.parameters(), strict=True):
        assert torch.equal(opt.state[p]["momentum_buffer"], ref.buffers[id(q)])


def test_musgd_orthogonalises_every_shape_in_few_padded_stacks(
    net: nn.Module, backward: Backward, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack_shapes: list[tuple[int, ...]] = []
    original = shape_buckets_module.orthogonalise

    def spy(G: Tensor, **kwargs: Any) -> Tensor:
        stack_shapes.append(tuple(G.shape))
        return original(G, **kwargs)

    monkeypatch.setattr(shape_buckets_module, "orthogonalise", spy)
    opt = MuSGD(param_groups(net, weight_decay=0.0), ns_max_flop_ratio=4.0)
    backward(net, 0)
    opt.step()
    # 8×27, 16×72, 2 × 16×16, 16×9 (enters as 9×16), 64×16 (16×64), 10×64: 7 matrices
    assert stack_shapes == opt.ns_stack_shapes
    assert sum(b for b, _, _ in stack_shapes) == 7
    assert len(stack_shapes) < 6


def test_musgd_flop_ratio_one_stacks_only_equal_shapes(net: nn.Module) -> None:
    opt = MuSGD(param_groups(net, weight_decay=0.0), ns_max_flop_ratio=1.0)
    assert sorted(opt.ns_stack_shapes) == sorted(
        [(1, 8, 27), (1, 16, 72), (2, 16, 16), (1, 9, 16), (1, 16, 64), (1, 10, 64)]
    )


def test_musgd_pads_no_cpu_matrix_by_default(net: nn.Module) -> None:
    # on a CPU the orthogonalisation's cost is its FLOPs, which padding adds to
    default = MuSGD(param_groups(net, weight_decay=0.0))
    padded = MuSGD(param_groups(net, weight_decay=0.0), ns_max_flop_ratio=2.0)
    equal_shapes = MuSGD(param_groups(net, weight_decay=0.0), ns_max_flop_ratio=1.0)
    assert default.ns_stack_shapes == equal_shapes.ns_stack_shapes
    assert len(padded.ns_stack_shapes) < len(default.ns_stack_shapes)


def _steps_with_ns_dtype(
    net: nn.Module, backward: Backward, ns_dtype: torch.dtype | None
) -> nn.Module:
    """A copy of ``net`` after two MuSGD steps with ``ns_dtype`` (``None``: the default)."""
    model = copy.deepcopy(net)
    opt = MuSGD(param_groups(model, weight_decay=0.01), ns_dtype=ns_dtype, **_HYPERS)
    for seed in range(2):
        opt.zero_grad()
        backward(model, seed)
        opt.step()
    return model


def test_musgd_orthogonalises_in_float32_off_cuda_and_bfloat16_on_it(
    net: nn.Module, backward: Backward
) -> None:
    default = MuSGD(param_groups(net, weight_decay=0.0))
    assert default.ns_dtype is None
    assert default.ns_dtype_for(torch.device("cpu")) is torch.float32
    assert default.ns_dtype_for(torch.device("cuda")) is torch.bfloat16
    named = MuSGD(param_groups(net, weight_decay=0.0), ns_dtype=torch.float32)
    assert named.ns_dtype_for(torch.device("cuda")) is torch.float32
    # the rule reaches the step: a CPU default is float32's bits, not bfloat16's
    float32 = _steps_with_ns_dtype(net, backward, torch.float32)
    assert _bit_equal(_steps_with_ns_dtype(net, backward, None), float32)
    assert not _bit_equal(_steps_with_ns_dtype(net, backward, torch.bfloat16), float32)


def test_musgd_channels_last_weights_step_as_contiguous_ones(net: nn.Module) -> None:
    strided = copy.deepcopy(net).to(memory_format=torch.channels_last)
    opts = [MuSGD(param_groups(m, weight_decay=0.01), **_HYPERS) for m in (net, strided)]
    generator = torch.Generator().manual_seed(0)
    for _ in range(2):
        grads = [torch.randn(p.shape, generator=generator) for p in net.parameters()]
        for model, opt in zip((net, strided), opts, strict=True):
            for p, g in zip(model.parameters(), grads, strict=True):
                p.grad = torch.empty_like(p).copy_(g)  # in the parameter's layout
            opt.step()
    assert _bit_equal(net, strided)
    conv = strided[3].weight
    assert conv.is_contiguous(memory_format=torch.channels_last)
    assert not conv.is_contiguous()


def test_musgd_lr_written_into_tensor_takes_effect(net: nn.Module, backward: Backward) -> None:
    opt = MuSGD(param_groups(net, weight_decay=0.01), **_HYPERS)
    lr_tensors = [group["lr"] for group in opt.param_groups]
    for lr in lr_tensors:
        lr.fill_(0.0)
    before = copy.deepcopy(net)
    backward(net, 0)
    opt.step()
    assert _bit_equal(net, before)
    assert [group["lr"] for group in opt.param_groups] == lr_tensors


def test_musgd_update_runner_replaces_the_update_after_the_closure(
    net: nn.Module, backward: Backward
) -> None:
    opt = MuSGD(param_groups(net, weight_decay=0.01), **_HYPERS)
    calls: list[str] = []

    def closure() -> float:
        calls.append("closure")
        backward(net, 0)
        return 1.5

    opt.update_runner = lambda: calls.append("runner")
    before = copy.deepcopy(net)
    assert opt.step(closure) == 1.5
    assert calls == ["closure", "runner"]
    assert _bit_equal(net, before)
    opt.update_runner = None
    opt.step()
    assert not _bit_equal(net, before)


def test_musgd_lr_change_matches_reference_with_new_lr(net: nn.Module, backward: Backward) -> None:
    net.double()
    ref_net = copy.deepcopy(net)
    opt = MuSGD(param_groups(net, weight_decay=0.01), ns_dtype=torch.float64, **_HYPERS)
    ref = _ReferenceMuSGD(param_groups(ref_net, weight_decay=0.01), **{**_HYPERS, "lr": 0.003})
    for group in opt.param_groups:
        group["lr"].fill_(0.003)
    for model in (net, ref_net):
        backward(model, 0)
    opt.step()
    ref.step()
    assert _float64_equal(net, ref_net)


def test_musgd_step_has_no_host_sync(
    net: nn.Module,
    backward: Backward,
    record_ops: Callable[[Callable[[], object]], list[str]],
    host_sync_ops: frozenset[str],
) -> None:
    opt = MuSGD(param_groups(net, weight_decay=0.01), **_HYPERS)
    backward(net, 0)
    ops = record_ops(opt.step)
    assert "mm" in ops or "bmm" in ops
    assert not host_sync_ops & set(ops)


def test_musgd_state_exists_before_first_step_and_keeps_addresses(
    net: nn.Module, backward: Backward
) -> None:
    opt = MuSGD(param_groups(net, weight_decay=0.01))
    pointers = {id(p): opt.state[p]["momentum_buffer"].data_ptr() for p in net.parameters()}
    backward(net, 0)
    opt.step()
    opt.load_state_dict(opt.state_dict())
    assert {id(p): opt.state[p]["momentum_buffer"].data_ptr() for p in net.parameters()} == pointers


def test_musgd_hyperparameters_are_0dim_float32_tensors(net: nn.Module) -> None:
    opt = MuSGD(param_groups(net, weight_decay=0.01), lr=0.02)
    values = [group[k] for group in opt.param_groups for k in HYPERPARAMETERS]
    assert all(isinstance(v, Tensor) and v.shape == () for v in values)
    assert {v.dtype for v in values} == {torch.float32}
    assert len({id(v) for v in values}) == len(values)


def test_musgd_state_dict_round_trip_resumes_bitwise(net: nn.Module, backward: Backward) -> None:
    opt = MuSGD(param_groups(net, weight_decay=0.01), **_HYPERS)
    for step in range(2):
        net.zero_grad()
        backward(net, step)
        opt.step()
    opt.param_groups[0]["lr"].fill_(0.02)
    resumed_net = copy.deepcopy(net)
    resumed = MuSGD(param_groups(resumed_net, weight_decay=0.01))
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    for step in range(2, 4):
        for model in (net, resumed_net):
            model.zero_grad()
            backward(model, step)
        opt.step()
        resumed.step()
    assert _bit_equal(net, resumed_net)


def test_musgd_state_dict_is_a_snapshot(net: nn.Module, backward: Backward) -> None:
    opt = MuSGD(param_groups(net, weight_decay=0.01), **_HYPERS)
    live = {id(p): opt.state[p]["momentum_buffer"] for p in net.parameters()}
    snapshot = opt.state_dict()
    assert all(opt.state[p]["momentum_buffer"] is live[id(p)] for p in net.parameters())
    backward(net, 0)
    opt.step()
    opt.param_groups[0]["lr"].fill_(1.0)
    opt.load_state_dict(snapshot)
    assert float(opt.param_groups[0]["lr"]) == pytest.approx(_HYPERS["lr"])
    assert all(not opt.state[p]["momentum_buffer"].any() for p in net.parameters())


def test_musgd_load_state_dict_rejects_mismatched_buffer_shape(net: nn.Module) -> None:
    opt = MuSGD(param_groups(net, weight_decay=0.01))
    state = opt.state_dict()
    state["state"][0]["momentum_buffer"] = torch.zeros(3)
    with pytest.raises(OptimizerStateError, match=r"momentum buffer of shape \(3,\)"):
        opt.load_state_dict(state)


def test_musgd_load_state_dict_rejects_foreign_optimizer_state(net: nn.Module) -> None:
    opt = MuSGD(param_groups(net, weight_decay=0.01))
    sgd = torch.optim.SGD(param_groups(net, weight_decay=0.01), lr=0.01, momentum=0.9)
    with pytest.raises(OptimizerStateError, match=r"lacks.*muon_weight"):
        opt.load_state_dict(sgd.state_dict())


def test_musgd_skips_parameters_without_gradient(net: nn.Module, backward: Backward) -> None:
    opt = MuSGD(param_groups(net, weight_decay=0.01), **_HYPERS)
    backward(net, 0)
    head = net[-1]
    assert isinstance(head, nn.Linear)
    head.weight.grad = None
    before = head.weight.detach().clone()
    opt.step()
    assert torch.equal(head.weight, before)
    assert not opt.state[head.weight]["momentum_buffer"].any()


def test_musgd_zero_gradient_gives_finite_weights(net: nn.Module) -> None:
    opt = MuSGD(param_groups(net, weight_decay=0.01), **_HYPERS)
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    assert all(torch.isfinite(p).all() for p in net.parameters())


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("momentum", 1.0, r"momentum must be in \[0, 1\), got 1.0"),
        ("lr", -0.1, r"lr must be finite and >= 0, got -0.1"),
        ("weight_decay", float("nan"), r"weight_decay must be finite and >= 0, got nan"),
    ],
)
def test_musgd_rejects_bad_hyperparameter(
    net: nn.Module, name: str, value: float, match: str
) -> None:
    with pytest.raises(OptimizerConfigError, match=match):
        MuSGD(net.parameters(), **{name: value})


@pytest.mark.parametrize("ratio", [0.5, float("inf")])
def test_musgd_rejects_bad_ns_max_flop_ratio(net: nn.Module, ratio: float) -> None:
    with pytest.raises(OptimizerConfigError, match=rf"ns_max_flop_ratio .* got {ratio!r}"):
        MuSGD(net.parameters(), ns_max_flop_ratio=ratio)


def test_musgd_group_added_later_joins_the_stacks(net: nn.Module, backward: Backward) -> None:
    groups = param_groups(net, weight_decay=0.0)
    vectors = [g for g in groups if all(p.ndim < 2 for p in g["params"])]
    (matrices,) = [g for g in groups if all(p.ndim >= 2 for p in g["params"])]
    opt = MuSGD(vectors)
    assert opt.ns_stack_shapes == []
    opt.add_param_group(matrices)
    assert sum(b for b, _, _ in opt.ns_stack_shapes) == len(matrices["params"])
    before = [p.detach().clone() for p in matrices["params"]]
    backward(net, 0)
    opt.step()
    assert all(not torch.equal(p, b) for p, b in zip(matrices["params"], before, strict=True))


def test_musgd_add_param_group_leaves_no_trace_on_error(net: nn.Module) -> None:
    groups = param_groups(net, weight_decay=0.0)
    opt = MuSGD(groups[:1])
    with pytest.raises(OptimizerConfigError, match="lr must be finite"):
        opt.add_param_group({**groups[1], "lr": float("inf")})
    assert len(opt.param_groups) == 1
    assert not any(p in opt.state for p in groups[1]["params"])


def test_musgd_rejects_group_on_two_devices() -> None:
    params = [nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(2, device="meta"))]
    with pytest.raises(OptimizerConfigError, match="exactly one device"):
        MuSGD(params)


@pytest.mark.gpu
def test_musgd_pads_cuda_matrices_by_default() -> None:
    # on CUDA the orthogonalisation's cost is its kernel launches, which padding saves
    net = _cuda_net()
    default = MuSGD(param_groups(net, weight_decay=0.0))
    padded = MuSGD(param_groups(net, weight_decay=0.0), ns_max_flop_ratio=2.0)
    equal_shapes = MuSGD(param_groups(net, weight_decay=0.0), ns_max_flop_ratio=1.0)
    assert default.ns_stack_shapes == padded.ns_stack_shapes
    assert len(default.ns_stack_shapes) < len(equal_shapes.ns_stack_shapes)


@pytest.mark.gpu
def test_gpu_musgd_orthogonalises_cuda_matrices_in_bfloat16_by_default() -> None:
    torch.manual_seed(0)
    grads = [torch.randn_like(p) for p in _cuda_net().parameters()]
    stepped = []
    for ns_dtype in (None, torch.bfloat16, torch.float32):
        torch.manual_seed(1)
        model = _cuda_net()
        opt = MuSGD(param_groups(model, weight_decay=0.01), ns_dtype=ns_dtype, **_HYPERS)
        for p, g in zip(model.parameters(), grads, strict=True):
            p.grad = g.clone()
        opt.step()
        stepped.append(model)
    default, bfloat16, float32 = stepped
    assert _bit_equal(default, bfloat16)
    assert not _bit_equal(default, float32)


@pytest.mark.gpu
def test_gpu_musgd_state_dict_is_a_host_snapshot_that_resumes_bitwise() -> None:
    # a checkpoint's optimizer state takes no device memory (a replayed fit's cache has no
    # room kept free for it), and still resumes into the live tensors bit for bit
    torch.manual_seed(0)
    net = _cuda_net()
    resumed_net = copy.deepcopy(net)
    opt = MuSGD(param_groups(net, weight_decay=0.01), **_HYPERS)
    resumed = MuSGD(param_groups(resumed_net, weight_decay=0.01), **_HYPERS)
    grads = [[torch.randn_like(p) for p in net.parameters()] for _ in range(3)]
    for p, g in zip(net.parameters(), grads[0], strict=True):
        p.grad = g.clone()
    opt.step()
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_allocated()
    state = opt.state_dict()
    assert torch.cuda.memory_allocated() == allocated
    tensors = [v for entry in state["state"].values() for v in entry.values()]
    tensors += [v for group in state["param_groups"] for v in group.values() if torch.is_tensor(v)]
    assert tensors
    assert all(t.device.type == "cpu" for t in tensors)
    resumed_net.load_state_dict(net.state_dict())
    resumed.load_state_dict(state)
    for step_grads in grads[1:]:
        for model, optimizer in ((net, opt), (resumed_net, resumed)):
            for p, g in zip(model.parameters(), step_grads, strict=True):
                p.grad = g.clone()
            optimizer.step()
    assert _bit_equal(net, resumed_net)


@pytest.mark.gpu
@pytest.mark.parametrize("ns_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_musgd_step_replays_in_cuda_graph_bitwise(
    ns_dtype: torch.dtype, memory_format: torch.memory_format
) -> None:
    torch.manual_seed(0)
    native_net = _cuda_net().to(memory_format=memory_format)
    graph_net = copy.deepcopy(native_net)
    native = MuSGD(param_groups(native_net, weight_decay=0.01), ns_dtype=ns_dtype, **_HYPERS)
    graphed = MuSGD(param_groups(graph_net, weight_decay=0.01), ns_dtype=ns_dtype, **_HYPERS)
    grads = [[torch.randn_like(p) for p in native_net.parameters()] for _ in range(4)]
    for model in (native_net, graph_net):
        for p, g in zip(model.parameters(), grads[0], strict=True):
            p.grad = g.clone()
    native.step()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        graphed.step()  # warm-up doubles as step 1: kernels and workspaces exist before capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graphed.step()
    for step in range(1, 4):
        for opt in (native, graphed):
            for group in opt.param_groups:
                group["lr"].fill_(0.05 / (step + 1))
                group["momentum"].fill_(0.8 + 0.03 * step)
        for model in (native_net, graph_net):
            for p, g in zip(model.parameters(), grads[step], strict=True):
                p.grad.copy_(g)
        torch.cuda.set_sync_debug_mode("error")
        try:
            native.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        graph.replay()
    torch.cuda.synchronize()
    assert _bit_equal(native_net, graph_net)
    for p, q in zip(native_net.parameters(), graph_net.parameters(), strict=True):
        assert torch.equal(native.state[p]["momentum_buffer"], graphed.state[q]["momentum_buffer"])


def _cuda_net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3),
        nn.BatchNorm2d(16),
        nn.Conv2d(16, 32, 3),
        nn.Conv2d(32, 32, 1),
        nn.Conv2d(32, 32, 1),
        nn.Conv2d(32, 128, 1),
        nn.Linear(128, 10),
    ).cuda()
