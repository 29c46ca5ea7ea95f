"""lucid_yolo.models: YOLO26-class networks in plain PyTorch."""

from lucid_yolo.models import outputs
from lucid_yolo.models.anchors import distances_to_xyxy, make_anchors, xyxy_to_distances
from lucid_yolo.models.attention import C2PSA, Attention, PSABlock
from lucid_yolo.models.backbone import Backbone
from lucid_yolo.models.blocks import SPPF, Bottleneck, C3k, C3k2
from lucid_yolo.models.conv import ConvBnAct
from lucid_yolo.models.decode import Detections, decode_end2end, decode_nms
from lucid_yolo.models.exceptions import (
    ExportError,
    ModelConfigError,
    ModelError,
    UnknownModelError,
    WeightsError,
)
from lucid_yolo.models.export import End2EndModel, export_onnx
from lucid_yolo.models.heads import Branch, DualHead
from lucid_yolo.models.model import STRIDES, TASKS, YOLO26, Task
from lucid_yolo.models.neck import Neck
from lucid_yolo.models.protos import Protos
from lucid_yolo.models.registry import (
    MODELS,
    TASK_IMAGE_SIZES,
    ModelSpec,
    create_model,
    list_models,
    model_spec,
)
from lucid_yolo.models.scales import SCALES, Scale
from lucid_yolo.models.summary import LayerRow, ModelSummary, model_summary
from lucid_yolo.models.weight_casts import CastConv2d, casting_weights
from lucid_yolo.models.weights import (
    ImportedWeights,
    WeightsReport,
    load_weights,
    read_weights,
    save_reference_weights,
)

__all__ = [
    # entry point and registry
    "MODELS",
    "TASK_IMAGE_SIZES",
    "ModelSpec",
    "create_model",
    "list_models",
    "model_spec",
    # networks
    "STRIDES",
    "TASKS",
    "YOLO26",
    "Backbone",
    "Neck",
    "DualHead",
    "Branch",
    "Protos",
    "Task",
    # scaling
    "SCALES",
    "Scale",
    # building blocks
    "C2PSA",
    "SPPF",
    "Attention",
    "Bottleneck",
    "C3k",
    "C3k2",
    "CastConv2d",
    "ConvBnAct",
    "PSABlock",
    # decoding and export (more in lucid_yolo.models.decode)
    "Detections",
    "decode_end2end",
    "decode_nms",
    "End2EndModel",
    "export_onnx",
    # autocast
    "casting_weights",
    # summary
    "LayerRow",
    "ModelSummary",
    "model_summary",
    # anchors
    "distances_to_xyxy",
    "make_anchors",
    "xyxy_to_distances",
    # pretrained weights (more in lucid_yolo.models.weights)
    "ImportedWeights",
    "WeightsReport",
    "load_weights",
    "read_weights",
    "save_reference_weights",
    # output contract
    "outputs",
    # errors
    "ExportError",
    "ModelConfigError",
    "ModelError",
    "UnknownModelError",
    "WeightsError",
]
