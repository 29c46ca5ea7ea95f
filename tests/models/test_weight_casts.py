"""lucid_yolo.models.weight_casts: the convolutions' autocast casts made together, same bits."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

import lucid_yolo.models.weight_casts as weight_casts
from lucid_yolo.models import YOLO26, CastConv2d, create_model
from lucid_yolo.models import outputs as keys
from lucid_yolo.models.registry import TASK_SUFFIXES

CPU_BF16 = ("cpu", torch.bfloat16)


def pair(task: str = "detect") -> tuple[YOLO26, YOLO26]:
    """Two equal networks: autocast's own casts, and the casts made together."""
    torch.manual_seed(0)
    per_tensor = create_model(f"yolo26n{TASK_SUFFIXES[task]}", num_classes=3).train()
    per_tensor.casts_weights_together = False
    together = copy.deepcopy(per_tensor)
    together.casts_weights_together = True
    return per_tensor, together


def everything(outputs: dict[str, Tensor]) -> Tensor:
    return torch.stack([o.float().sum() for o in outputs.values() if o.requires_grad]).sum()


def step(
    net: nn.Module,
    images: Tensor,
    *,
    autocast: tuple[str, torch.dtype] | None = CPU_BF16,
    loss: Callable[[dict[str, Tensor]], Tensor] = everything,
) -> tuple[dict[str, Tensor], Tensor]:
    device, dtype = autocast or ("cpu", torch.bfloat16)
    with torch.autocast(device, dtype=dtype, enabled=autocast is not None):
        outputs = net(images)
    total = loss(outputs)
    total.backward()
    return outputs, total


def node_names(root: Tensor) -> list[str]:
    seen: set[object] = set()
    names: list[str] = []
    stack = [root.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


def assert_same_bits(
    a: YOLO26, b: YOLO26, a_out: dict[str, Tensor], b_out: dict[str, Tensor]
) -> None:
    assert a_out.keys() == b_out.keys()
    for key in a_out:
        assert a_out[key].dtype == b_out[key].dtype, key
        assert torch.equal(a_out[key], b_out[key]), key
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None and q.grad is not None:
            assert torch.equal(p.grad, q.grad), name
            assert p.grad.stride() == q.grad.stride(), name


def cast_tensors(net: nn.Module, *, trainable_only: bool = False) -> int:
    return sum(
        t is not None and (t.requires_grad or not trainable_only)
        for m in net.modules()
        if isinstance(m, CastConv2d)
        for t in (m.weight, m.bias)
    )


@pytest.mark.parametrize("task", ["detect", "segment"])
def test_under_autocast_the_casts_made_together_give_the_same_outputs_and_gradients(
    task: str, images: Tensor
) -> None:
    per_tensor, together = pair(task)
    per_tensor_out, per_tensor_loss = step(per_tensor, images)
    together_out, together_loss = step(together, images)
    assert_same_bits(per_tensor, together, per_tensor_out, together_out)
    per_tensor_nodes, together_nodes = node_names(per_tensor_loss), node_names(together_loss)
    # one backward node per child of a forward part holding convolutions (a backbone stage, a
    # neck block, a head branch set), so one group's gradients at a time wait for their cast
    parts = [together.backbone, together.neck, together.head, together.protos]
    groups = sum(
        any(isinstance(m, CastConv2d) for m in child.modules())
        for part in parts
        if part is not None
        for child in part.children()
    )
    assert (
        together_nodes.count("_GradientsBackBackward")
        == groups
        == (18 if task == "segment" else 12)
    )
    assert together_nodes.count("ToCopyBackward0") == (
        per_tensor_nodes.count("ToCopyBackward0") - cast_tensors(together)
    )


def test_each_forward_part_casts_its_weights_in_one_copy(images: Tensor) -> None:
    per_tensor, together = pair("segment")
    counts = []
    for net in (per_tensor, together):
        with (
            torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof,
            torch.autocast("cpu", dtype=torch.bfloat16),
        ):
            net(images)
        counts.append({e.key: e.count for e in prof.key_averages()})
    # backbone and neck, the head, the segment heads
    assert counts[1]["aten::_foreach_copy_"] == 3
    assert "aten::_foreach_copy_" not in counts[0]
    assert counts[0]["aten::_to_copy"] - counts[1]["aten::_to_copy"] == cast_tensors(together)


def test_yolo26n_casts_all_its_convolutions_weights_and_biases() -> None:
    _, together = pair()
    layers = [m for m in together.modules() if isinstance(m, nn.Conv2d)]
    assert all(isinstance(m, CastConv2d) for m in layers)
    assert (len(layers), cast_tensors(together)) == (126, 138)


def test_outside_autocast_the_layers_read_their_own_parameters(images: Tensor) -> None:
    per_tensor, together = pair()
    per_tensor_out, _ = step(per_tensor, images, autocast=None)
    together_out, together_loss = step(together, images, autocast=None)
    assert_same_bits(per_tensor, together, per_tensor_out, together_out)
    assert "_GradientsBackBackward" not in node_names(together_loss)


def test_a_parameter_no_loss_reaches_keeps_no_gradient(images: Tensor) -> None:
    def one_to_one(outputs: dict[str, Tensor]) -> Tensor:
        return torch.stack(
            [v.float().sum() for k, v in outputs.items() if k.startswith("o2o")]
        ).sum()

    per_tensor, together = pair()
    per_tensor_out, _ = step(per_tensor, images, loss=one_to_one)
    together_out, together_loss = step(together, images, loss=one_to_one)
    assert_same_bits(per_tensor, together, per_tensor_out, together_out)
    branch = together.head.o2m[keys.BOX]
    assert branch.out[0][keys.BOX].weight.grad is None
    assert all(p.grad is None for p in together.backbone.parameters())
    # the one-to-one branches are one block, whose node the loss reaches
    assert node_names(together_loss).count("_GradientsBackBackward") == 1


def test_frozen_parameters_are_left_to_autocast(images: Tensor) -> None:
    per_tensor, together = pair()
    for net in (per_tensor, together):
        for parameter in list(net.parameters())[:-5]:
            parameter.requires_grad_(False)
    per_tensor_out, per_tensor_loss = step(per_tensor, images)
    together_out, together_loss = step(together, images)
    assert_same_bits(per_tensor, together, per_tensor_out, together_out)
    trainable = cast_tensors(together, trainable_only=True)
    per_tensor_nodes, together_nodes = node_names(per_tensor_loss), node_names(together_loss)
    assert 0 < trainable < cast_tensors(together)
    assert "_GradientsBackBackward" in together_nodes
    assert together_nodes.count("ToCopyBackward0") == (
        per_tensor_nodes.count("ToCopyBackward0") - trainable
    )


def test_without_grad_the_evaluation_forward_is_left_to_autocast(images: Tensor) -> None:
    """Autocast frees each cast after its layer there; a scope would hold a part's to its end."""
    per_tensor, together = pair()
    outputs = []
    for net in (per_tensor.eval(), together.eval()):
        with (
            torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof,
            torch.no_grad(),
            torch.autocast("cpu", dtype=torch.bfloat16),
        ):
            outputs.append(net(images))
        assert "aten::_foreach_copy_" not in {e.key for e in prof.key_averages()}
    assert outputs[0].keys() == outputs[1].keys()
    assert all(torch.equal(outputs[0][k], outputs[1][k]) for k in outputs[0])


def test_a_float64_network_is_left_to_autocast_which_does_not_cast_it(images: Tensor) -> None:
    per_tensor, together = (net.double() for net in pair())
    per_tensor_out, _ = step(per_tensor, images.double())
    together_out, _ = step(together, images.double())
    assert_same_bits(per_tensor, together, per_tensor_out, together_out)
    assert all(o.dtype == torch.float64 for o in together_out.values())


def test_a_deep_copy_casts_its_own_parameters(images: Tensor) -> None:
    """An EMA is a deep copy: it must read its own weights, not the original's."""
    per_tensor, together = pair()
    step(together, images)
    copied = copy.deepcopy(together)
    per_tensor_copy = copy.deepcopy(per_tensor)
    with torch.no_grad():
        for net in (copied, per_tensor_copy):
            for parameter in net.parameters():
                parameter.mul_(0.5)
    copied_out, copied_loss = step(copied, images)
    per_tensor_out, _ = step(per_tensor_copy, images)
    assert all(torch.equal(per_tensor_out[k], copied_out[k]) for k in per_tensor_out)
    assert node_names(copied_loss).count("_GradientsBackBackward") == 12


def test_a_forward_that_raised_leaves_no_casts_behind(images: Tensor) -> None:
    _, together = pair()
    entered: list[int] = []

    def refuse(module: nn.Module, args: tuple[Tensor, ...]) -> None:
        entered.append(len(weight_casts._SCOPE.get()))
        raise RuntimeError("refused inside the scope")

    hook = together.neck.register_forward_pre_hook(refuse)
    with pytest.raises(RuntimeError, match="refused"), torch.autocast("cpu", dtype=torch.bfloat16):
        together(images)
    hook.remove()
    assert entered[0] > 0  # the backbone's and neck's layers were in the scope
    assert len(weight_casts._SCOPE.get()) == 0
    outputs, _ = step(together, images, autocast=None)
    assert all(o.dtype == torch.float32 for o in outputs.values())


def test_a_part_called_on_its_own_is_the_same(images: Tensor) -> None:
    """The trainer's replay regions call the forward's parts, not ``forward``."""
    per_tensor, together = pair("segment")
    results = []
    for net in (per_tensor, together):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            features = net.features(images)
            results.append({**net.predictions(features), **net.segment_outputs(features)})
    assert results[0].keys() == results[1].keys()
    assert all(torch.equal(results[0][k], results[1][k]) for k in results[0])
    assert node_names(everything(results[1])).count("_GradientsBackBackward") == 18


@pytest.mark.gpu
@pytest.mark.usefixtures("deterministic")
@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_on_cuda_in_channels_last_the_casts_made_together_are_the_same_bits(task: str) -> None:
    """The CUDA ``_foreach_copy_`` takes its multi-tensor path, which the CPU never runs."""
    per_tensor, together = (net.cuda().to(memory_format=torch.channels_last) for net in pair(task))
    generator = torch.Generator(device="cuda").manual_seed(0)
    images = torch.rand(4, 3, 128, 128, device="cuda", generator=generator)
    images = images.contiguous(memory_format=torch.channels_last)
    cuda_bf16 = ("cuda", torch.bfloat16)
    per_tensor_out, _ = step(per_tensor, images, autocast=cuda_bf16)
    together_out, together_loss = step(together, images, autocast=cuda_bf16)
    assert_same_bits(per_tensor, together, per_tensor_out, together_out)
    assert "_GradientsBackBackward" in node_names(together_loss)


def test_a_new_network_leaves_its_casts_to_autocast(images: Tensor) -> None:
    torch.manual_seed(0)
    net = create_model("yolo26n", num_classes=3).train()
    _, loss = step(net, images)
    assert net.casts_weights_together is False
    assert "_GradientsBackBackward" not in node_names(loss)
