"""ONNX export of the end-to-end (NMS-free) path, static shapes.

The exported graph is the deployed YOLO26 model: backbone, neck, the one-to-one head (the
one-to-many head and the semantic branch are never run) and the top-k selection of
:mod:`lucid_yolo.models.decode.topk`, so a runtime gets final detections without any
NonMaxSuppression node. Every output has a fixed size (``max_det`` rows per image, best first;
the caller thresholds the scores).

==============  ======================  ==============================================
output          shape                   meaning
==============  ======================  ==============================================
``boxes``       (B, k, 4) float32       ``xyxy`` input pixels (OBB: hull)
``scores``      (B, k) float32          confidence
``classes``     (B, k) int64            class id
``masks``       (B, k, H/4, W/4)        segment: mask probabilities, 0 outside the box
``keypoints``   (B, k, K, 3)            pose: ``x, y`` pixels, visibility probability
``rboxes``      (B, k, 5)               obb: ``xywhr``, long-edge convention
==============  ======================  ==============================================
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from lucid_yolo.models import outputs as keys
from lucid_yolo.models.decode.dense import decode_dense
from lucid_yolo.models.decode.topk import MAX_DETECTIONS, topk_dense
from lucid_yolo.models.exceptions import ExportError
from lucid_yolo.models.model import YOLO26

TASK_OUTPUTS = {
    "detect": ("boxes", "scores", "classes"),
    "segment": ("boxes", "scores", "classes", "masks"),
    "pose": ("boxes", "scores", "classes", "keypoints"),
    "obb": ("boxes", "scores", "classes", "rboxes"),
}
"""Output names of the exported graph per task, in order."""


class End2EndModel(nn.Module):
    """Images → fixed-size top-k detections, the graph that is exported.

    Args:
        model: the network (used in eval mode; its one-to-many head is left out).
        max_det: detections per image.
    """

    def __init__(self, model: YOLO26, max_det: int = MAX_DETECTIONS) -> None:
        super().__init__()
        self.model = model
        self.max_det = max_det
        self.output_names = TASK_OUTPUTS[model.task]

    def forward(self, images: Tensor) -> tuple[Tensor, ...]:
        """``(B, 3, H, W)`` float in ``[0, 1]`` → the outputs named in :data:`TASK_OUTPUTS`."""
        net = self.model
        features = net.features(images)
        raw = net.head.forward_o2o(features)
        if net.protos is not None:
            raw[keys.PROTOS] = net.protos(features)[0]
        dense = decode_dense(raw, (images.shape[-2], images.shape[-1]), strides=net.strides)
        top = topk_dense(dense, self.max_det)
        return tuple(top[name] for name in self.output_names)


def export_onnx(
    model: YOLO26,
    path: str | Path,
    image_size: int | tuple[int, int],
    *,
    batch_size: int = 1,
    max_det: int = MAX_DETECTIONS,
    opset_version: int = 18,
) -> Path:
    """Export the end-to-end path of ``model`` to an ONNX file with static shapes.

    Uses the dynamo-based exporter of ``torch.onnx`` (needs ``onnx`` and ``onnxscript``).

    Args:
        model: the network; it is copied, the caller's module is not changed.
        path: output ``.onnx`` file.
        image_size: square side or ``(H, W)``, multiples of 32.
        batch_size: fixed batch size of the graph.
        max_det: detections per image.
        opset_version: ONNX opset.

    Returns:
        The written path.

    Raises:
        ExportError: when the exporter fails or is not installed.
    """
    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    wrapper = End2EndModel(copy.deepcopy(model).eval(), max_det).eval()
    example = torch.zeros(batch_size, 3, height, width, device=next(model.parameters()).device)
    path = Path(path)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            # the exporter warns about its own internals (deprecations, fallbacks)
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                wrapper,
                (example,),
                dynamo=True,
                input_names=["images"],
                output_names=list(wrapper.output_names),
                opset_version=opset_version,
                verbose=False,
            )
            if program is None:
                raise ExportError("torch.onnx.export returned no program; cannot save the model")
            program.save(str(path))
    except ImportError as error:
        raise ExportError(
            f"ONNX export needs the onnx and onnxscript packages ({error}); install them, e.g. "
            "`uv sync --group dev`"
        ) from error
    return path


__all__ = ["TASK_OUTPUTS", "End2EndModel", "export_onnx"]
