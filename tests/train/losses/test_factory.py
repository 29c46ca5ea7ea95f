"""build_loss maps task names to loss classes."""

from __future__ import annotations

import pytest
import torch
from loss_cases import STRIDE, task_case
from torch.utils._python_dispatch import TorchDispatchMode

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
