"""build_loss maps task names to loss classes."""

from __future__ import annotations

import pytest
import torch
from loss_cases import STRIDE, make_batch, task_case
from torch.utils._python_dispatch import TorchDispatchMode

from lucid_yolo.models import create_model
from lucid_yolo.models.cpu_threads import one_cpu_thread
from lucid_yolo.train.losses import (
    DetectionLoss,
    OBBLoss,
    PoseLoss,
    SegmentationLoss,
    build_loss,
)


@pytest.mark.parametrize(
    ("task", "cls"),
    [
        ("detect", DetectionLoss),
        ("segment", SegmentationLoss),
        ("pose", PoseLoss),
        ("obb", OBBLoss),
    ],
)
def test_build_loss_task_class(task: str, cls: type) -> None:
    loss = build_loss(task, 3)
    assert type(loss) is cls
    assert loss.num_classes == 3


def test_build_loss_forwards_options() -> None:
    loss = build_loss("pose", 1, num_keypoints=5, topk=4)
    assert isinstance(loss, PoseLoss)
    assert loss.num_keypoints == 5
    assert loss.assigners["o2m"].topk == 4


def test_build_loss_unknown_task_suggests_name() -> None:
    with pytest.raises(ValueError, match="unknown task 'segmnet': did you mean 'segment'"):
        build_loss("segmnet", 1)


class _OpTrace(TorchDispatchMode):
    """Records every aten op with its output shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, tuple[tuple[int, ...], ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        flat = out if isinstance(out, (tuple, list)) else (out,)
        shapes = tuple(tuple(t.shape) for t in flat if isinstance(t, torch.Tensor))
        self.ops.append((str(func), shapes))
        return out


def _trace(task: str, num_valid: int) -> list[tuple[str, tuple[tuple[int, ...], ...]]]:
    options: dict[str, object] = {"num_keypoints": 3} if task == "pose" else {}
    loss = build_loss(task, 2, strides=(STRIDE,), **options)
    warm_outputs, warm_batch = task_case(task, 1)
    loss(warm_outputs, warm_batch, 0.0)  # builds the anchor cache outside the trace
    outputs, batch = task_case(task, num_valid)
    with _OpTrace() as trace:
        total, _ = loss(outputs, batch, torch.tensor(0.5))
        total.backward()
    return trace.ops


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_build_loss_same_ops_and_shapes_whatever_the_targets(task: str) -> None:
    # The recorded op sequence must not depend on how many instances are real: that is what lets
    # the assigner and loss run inside a CUDA graph. No host sync either.
    traces = [_trace(task, num_valid) for num_valid in (0, 1, 3)]
    assert traces[0] == traces[1] == traces[2]
    names = {name for name, _ in traces[0]}
    assert not names & {"aten._local_scalar_dense.default", "aten.nonzero.default"}
    assert any("topk" in name for name in names)
    assert any("backward" in name for name in names)


@pytest.mark.gpu
@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
# The eager comparison step runs on the default stream after a side-stream warm-up kept the
# inputs' AccumulateGrad nodes alive; torch warns about the stream switch, which is harmless here.
@pytest.mark.filterwarnings("ignore:The AccumulateGrad node's stream does not match:UserWarning")
def test_build_loss_cuda_graph_replay_equals_eager(task: str) -> None:
    device = torch.device("cuda")
    options: dict[str, object] = {"num_keypoints": 3} if task == "pose" else {}
    loss = build_loss(task, 2, strides=(STRIDE,), **options).to(device)
    outputs, batch = task_case(task, 1)
    static_outputs = {k: v.detach().to(device).requires_grad_() for k, v in outputs.items()}
    static_batch = {k: v.to(device) for k, v in batch.items()}
    fraction = torch.tensor(0.5, device=device)
    keys = sorted(static_outputs)

    def step() -> tuple[torch.Tensor, tuple[torch.Tensor | None, ...]]:
        total, _ = loss(static_outputs, static_batch, fraction)  # type: ignore[arg-type]
        inputs = [static_outputs[key] for key in keys]
        return total, torch.autograd.grad(total, inputs, allow_unused=True)

    # Warm up on a side stream (builds the anchor cache), then record assigner + loss + backward.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_total, static_grads = step()

    new_outputs, new_batch = task_case(task, 3, seed=1)
    with torch.no_grad():
        for key, value in new_outputs.items():
            static_outputs[key].copy_(value)
    for key, value in new_batch.items():
        static_batch[key].copy_(value)
    graph.replay()
    eager_total, eager_grads = step()
    torch.cuda.synchronize()
    assert torch.equal(static_total, eager_total)
    for key, replayed, eager in zip(keys, static_grads, eager_grads, strict=True):
        assert (replayed is None) == (eager is None), key
        if replayed is not None and eager is not None:
            assert torch.equal(replayed, eager), key


def test_build_loss_trains_every_parameter_of_a_real_detector() -> None:
    model = create_model("yolo26n", num_classes=2).train()
    images = torch.rand(1, 3, 64, 64)
    batch = make_batch([[4.0, 6.0, 30.0, 40.0], [30.0, 30.0, 60.0, 50.0]], [0, 1])
    batch["images"] = (images * 255).to(torch.uint8)
    with one_cpu_thread():
        total, _ = build_loss("detect", 2)(model(images), batch, 0.0)
        total.backward()
    assert torch.isfinite(total)
    assert [name for name, p in model.named_parameters() if p.grad is None] == []


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_build_loss_branch_weight_routes_gradients(task: str) -> None:
    # With ProgLoss pinned to the one-to-many branch, the one-to-one outputs get exactly zero.
    options: dict[str, object] = {"num_keypoints": 3} if task == "pose" else {}
    loss = build_loss(task, 2, strides=(STRIDE,), o2m_start=1.0, o2m_end=1.0, **options)
    outputs, batch = task_case(task, 2)
    total, _ = loss(outputs, batch, 0.5)
    total.backward()
    for key, value in outputs.items():
        assert value.grad is not None, key
        if key.startswith("o2o."):
            assert value.grad.eq(0).all(), key
        else:
            assert value.grad.abs().sum() > 0, key
