"""tools/fused_weight_casts.py: the convolutions' autocast casts in one pass, the same bits."""

from __future__ import annotations

import copy
from types import ModuleType

import pytest
import torch
from tool_modules import load_tool
from torch import Tensor, nn

from lucid_yolo.models import create_model


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("fused_weight_casts", monkeypatch)


def step(model: nn.Module, images: Tensor, autocast: bool) -> tuple[dict[str, Tensor], Tensor]:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        outputs = model(images)
    loss = torch.stack([o.float().sum() for o in outputs.values() if o.requires_grad]).sum()
    loss.backward()
    return outputs, loss


def node_names(loss: Tensor) -> list[str]:
    seen: set[object] = set()
    names: list[str] = []
    stack = [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


@pytest.fixture
def models() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    plain = create_model("yolo26n").train()
    return plain, copy.deepcopy(plain)


def test_under_autocast_the_fused_casts_give_the_same_outputs_and_gradients_bitwise(
    tool: ModuleType, models: tuple[nn.Module, nn.Module]
) -> None:
    plain, fused = models
    convs = tool.fuse_weight_casts(fused)
    cast = sum(
        1
        for m in fused.modules()
        if isinstance(m, nn.Conv2d)
        for t in (m.weight, m.bias)
        if t is not None
    )
    images = torch.rand(1, 3, 64, 64)
    plain_outputs, plain_loss = step(plain, images, autocast=True)
    fused_outputs, fused_loss = step(fused, images, autocast=True)
    assert convs == 126
    assert all(torch.equal(plain_outputs[k], fused_outputs[k]) for k in plain_outputs)
    for p, q in zip(plain.parameters(), fused.parameters(), strict=True):
        assert p.grad is not None
        assert q.grad is not None
        assert torch.equal(p.grad, q.grad)
        assert p.grad.stride() == q.grad.stride()
    plain_nodes, fused_nodes = node_names(plain_loss), node_names(fused_loss)
    assert fused_nodes.count("_CastAllBackward") == 1
    assert fused_nodes.count("ToCopyBackward0") == plain_nodes.count("ToCopyBackward0") - cast


def test_outside_autocast_the_convolutions_read_their_own_parameters(
    tool: ModuleType, models: tuple[nn.Module, nn.Module]
) -> None:
    plain, fused = models
    tool.fuse_weight_casts(fused)
    images = torch.rand(1, 3, 64, 64)
    plain_outputs, _ = step(plain, images, autocast=False)
    fused_outputs, fused_loss = step(fused, images, autocast=False)
    assert all(torch.equal(plain_outputs[k], fused_outputs[k]) for k in plain_outputs)
    assert "_CastAllBackward" not in node_names(fused_loss)


def test_frozen_parameters_are_cast_without_a_gradient_as_autocast_casts_them(
    tool: ModuleType, models: tuple[nn.Module, nn.Module]
) -> None:
    plain, fused = models
    for model in models:
        for parameter in list(model.parameters())[:-5]:
            parameter.requires_grad_(False)
    tool.fuse_weight_casts(fused)
    images = torch.rand(1, 3, 64, 64)
    _, plain_loss = step(plain, images, autocast=True)
    _, fused_loss = step(fused, images, autocast=True)
    for p, q in zip(plain.parameters(), fused.parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None)
        assert p.grad is None or torch.equal(p.grad, q.grad)
    # a frozen weight's cast needs no gradient, so its convolution needs no backward
    convolutions = [
        names.count("ConvolutionBackward0") for names in map(node_names, (plain_loss, fused_loss))
    ]
    assert convolutions[0] == convolutions[1] < 126


def test_a_forward_that_raised_leaves_no_casts_for_the_next(
    tool: ModuleType, models: tuple[nn.Module, nn.Module]
) -> None:
    plain, fused = models
    tool.fuse_weight_casts(fused)
    with pytest.raises(RuntimeError), torch.autocast("cpu", dtype=torch.bfloat16):
        fused(torch.rand(1, 4, 64, 64))  # four channels: the first convolution refuses them
    images = torch.rand(1, 3, 64, 64)
    plain_outputs, _ = step(plain, images, autocast=False)
    fused_outputs, _ = step(fused, images, autocast=False)
    assert all(torch.equal(plain_outputs[k], fused_outputs[k]) for k in plain_outputs)


def test_a_network_without_convolutions_is_refused(tool: ModuleType) -> None:
    with pytest.raises(ValueError, match="has no Conv2d"):
        tool.fuse_weight_casts(nn.Linear(2, 2))


def test_the_layout_benchmark_offers_the_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_tool("bench_memory_format", monkeypatch)
    assert bench.LAYOUTS[bench.FUSED_CASTS] is torch.channels_last
