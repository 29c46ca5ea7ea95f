"""Ultralytics as a test peer: build YOLO26 networks from its YAMLs, save them as it does, run them.

Shared by ``make_ultralytics_fixture.py`` and ``check_ultralytics_import.py``. Ultralytics is never
a dependency of lucid-yolo: run these tools in a separate environment that has it, with the
workspace sources on ``PYTHONPATH`` (the command is in each tool's docstring).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

TASK_YAML_SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}
REFERENCE_OUTPUTS = {
    "boxes": "box",
    "scores": "cls",
    "mask_coefficient": "mask_coef",
    "kpts": "kpt",
    "angle": "angle",
}
"""Reference raw-output names → lucid-yolo output names (:mod:`lucid_yolo.models.outputs`)."""


def build_reference(
    task: str,
    scale: str,
    *,
    num_classes: int | None = None,
    scale_override: list[float] | None = None,
    kpt_shape: tuple[int, int] | None = None,
    num_masks: int | None = None,
    seed: int = 0,
) -> Any:
    """An Ultralytics ``YOLO`` wrapper around a YOLO26 network built from its YAML (no weights
    downloaded), optionally with another class count, keypoint shape, prototype count or scale
    multipliers."""
    from ultralytics import YOLO
    from ultralytics.nn.tasks import yaml_model_load

    name = f"yolo26{scale}{TASK_YAML_SUFFIX[task]}.yaml"
    torch.manual_seed(seed)
    wrapper = YOLO(name)
    if num_classes is None and scale_override is None and kpt_shape is None and num_masks is None:
        return wrapper
    config = yaml_model_load(name)
    if scale_override is not None:
        config["scales"] = {scale: scale_override}
        config["scale"] = scale
    if kpt_shape is not None:
        config["kpt_shape"] = list(kpt_shape)
    if num_masks is not None:  # the segment head's arguments are [nc, masks, proto width]
        config["head"][-1][-1][1] = num_masks
    torch.manual_seed(seed)
    network = type(wrapper.model)(config, nc=num_classes or config["nc"], verbose=False)
    wrapper.model = network
    return wrapper


def perturb_statistics(wrapper: Any, seed: int = 0) -> None:
    """Give every BatchNorm non-trivial running statistics and affine terms, so an eval-mode
    comparison exercises them (fresh ones are 0 and 1)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in wrapper.model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                if module.running_mean is None or module.running_var is None:
                    raise ValueError(f"{module} tracks no running statistics to perturb")
                n = module.num_features
                module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
                module.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
                module.weight.copy_(torch.rand(n, generator=generator) + 0.5)
                module.bias.copy_(torch.randn(n, generator=generator) * 0.1)


def load_reference(path: Path) -> Any:
    """The network of a saved checkpoint as the reference reads it (float32, eval mode), its
    head set to decode the one-to-one branch end to end as the reference's predictor does.

    ``weights_only=False`` runs the pickled Ultralytics code: acceptable here only because these
    tools read checkpoints they have just written themselves.
    """
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    network = checkpoint.get("ema") or checkpoint["model"]
    network.model[-1].end2end = True
    return network.float().eval()


def reference_outputs(network: Any, images: Tensor) -> dict[str, Tensor]:
    """Raw eval-mode outputs of a reference network under lucid-yolo's output keys, plus its
    end-to-end detections as ``decoded`` (B, k, 6 + extra)."""
    with torch.no_grad():
        result = network(images)
    decoded, raw = result
    if isinstance(decoded, tuple):  # segment: (detections, prototypes)
        decoded = decoded[0]
    outputs: dict[str, Tensor] = {"decoded": decoded}
    for group, prefix in (("one2many", "o2m"), ("one2one", "o2o")):
        for name, value in raw[group].items():
            if name == "proto":
                outputs["protos"] = value
            elif name in REFERENCE_OUTPUTS:
                outputs[f"{prefix}.{REFERENCE_OUTPUTS[name]}"] = value
    return outputs


def compare(ours: dict[str, Tensor], reference: dict[str, Tensor]) -> dict[str, Any]:
    """Per raw output: bitwise equal, and the largest absolute difference."""
    rows: dict[str, Any] = {}
    for key, expected in reference.items():
        if key == "decoded":
            continue
        got = ours[key]
        rows[key] = {
            "bitwise": bool(torch.equal(got, expected)),
            "max_abs_diff": float((got.double() - expected.double()).abs().max()),
        }
    return rows


def compare_decoded(
    task: str, ours: dict[str, Tensor], reference: dict[str, Tensor], image_size: tuple[int, int]
) -> bool:
    """The reference's end-to-end detections against lucid-yolo's decoder on its own outputs:
    scores, classes and boxes (OBB: rotated boxes in the long-edge convention) bitwise equal."""
    from lucid_yolo.models.decode import decode_dense, topk_dense
    from lucid_yolo.models.geometry import normalize_xywhr

    decoded = reference["decoded"]
    top = topk_dense(decode_dense(ours, image_size), decoded.shape[1])
    same = torch.equal(top["scores"], decoded[..., 4]) and torch.equal(
        top["classes"].to(decoded.dtype), decoded[..., 5]
    )
    if task == "obb":
        reference_rboxes = normalize_xywhr(torch.cat((decoded[..., :4], decoded[..., 6:7]), -1))
        return same and torch.equal(top["rboxes"], reference_rboxes)
    same = same and torch.equal(top["boxes"], decoded[..., :4])
    if task == "pose":
        K = top["keypoints"].shape[2]
        same = same and torch.equal(
            top["keypoints"], decoded[..., 6:].reshape(*decoded.shape[:2], K, 3)
        )
    return same


__all__ = [
    "REFERENCE_OUTPUTS",
    "TASK_YAML_SUFFIX",
    "build_reference",
    "compare",
    "compare_decoded",
    "load_reference",
    "perturb_statistics",
    "reference_outputs",
]
