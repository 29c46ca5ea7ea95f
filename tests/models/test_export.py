"""ONNX export of the end-to-end path: runs in onnxruntime, matches torch, has no NMS node."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import onnxruntime
import pytest
import torch
from torch import Tensor, nn

from lucid_yolo.models import TASKS, YOLO26, create_model
from lucid_yolo.models.decode import decode_end2end
from lucid_yolo.models.export import TASK_OUTPUTS, End2EndModel, export_onnx
from lucid_yolo.models.registry import TASK_SUFFIXES

Calibrate = Callable[[nn.Module], nn.Module]


def calibrated_model(task: str, calibrate: Calibrate) -> YOLO26:
    """A fresh model in eval mode with calibrated BatchNorm statistics, so anchors score
    clearly apart and the top-k order is not decided by float rounding."""
    model = create_model(f"yolo26n{TASK_SUFFIXES[task]}", num_classes=3)
    calibrate(model)
    return model


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_export_onnx_matches_torch_without_nms(
    task: str, tmp_path: Path, images: Tensor, calibrate: Calibrate
) -> None:
    model = calibrated_model(task, calibrate)
    path = export_onnx(model, tmp_path / "model.onnx", 64, max_det=20)

    graph = onnx.load(str(path)).graph
    assert "NonMaxSuppression" not in {node.op_type for node in graph.node}
    assert [output.name for output in graph.output] == list(TASK_OUTPUTS[task])

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    exported = session.run(None, {"images": images[:1].numpy()})
    with torch.no_grad():
        reference = End2EndModel(model, max_det=20)(images[:1])
    for result, expected in zip(exported, reference, strict=True):
        torch.testing.assert_close(torch.from_numpy(result), expected, rtol=1e-4, atol=1e-3)


def test_end2end_model_agrees_with_decode_end2end(images: Tensor, calibrate: Calibrate) -> None:
    model = calibrated_model("pose", calibrate)
    with torch.no_grad():
        boxes, scores, classes, keypoints = End2EndModel(model, max_det=20)(images[:1])
        (decoded,) = decode_end2end(model(images[:1]), (64, 64), conf_threshold=0.0, max_det=20)
    torch.testing.assert_close(decoded.boxes, boxes[0])
    torch.testing.assert_close(decoded.scores, scores[0])
    assert torch.equal(decoded.classes, classes[0])
    assert decoded.keypoints is not None
    torch.testing.assert_close(decoded.keypoints, keypoints[0])
