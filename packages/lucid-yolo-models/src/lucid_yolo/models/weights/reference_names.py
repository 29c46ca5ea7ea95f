"""How a lucid-yolo network's tensors are named in an Ultralytics YOLO26 checkpoint.

The mapping is derived from the network's structure, the same rule for every task and scale:

- **Backbone and neck**: the reference numbers its layers ``model.0`` … ``model.22`` in forward
  order, parameter-free ones (upsample, concatenate) included. Every child of a backbone stage is
  one reference layer, in order; every neck module is one reference layer after the
  parameter-free layers :data:`NECK_LAYOUT` counts before it. Inside a layer the submodule names
  are the same (``cv1``, ``m.0.cv2``, ``attn.qkv`` …), so the rest of the key carries over.
- **Head** (``model.23``): the one-to-many branches are ``cv2`` (box), ``cv3`` (class) and
  ``cv4`` (the task branch); the one-to-one copies carry a ``one2one_`` prefix. A branch's trunk
  and output conv are one sequence there (``cv2.<level>.0``, ``.1``, output ``.2``); the class
  trunk's four convs are grouped in depthwise + pointwise pairs (``cv3.<level>.<pair>.<0|1>``). A
  branch with several outputs (pose: keypoints and their scales) has its output convs apart from
  the trunk there, one list per output: ``cv4_kpts`` and ``cv4_sigma``.
- **Prototypes** (``model.23.proto``): the same modules, three renamed (:data:`PROTO_NAMES`).

Reference tensors with no counterpart here (the pose head's RealNVP flow, used only by the
reference's keypoint loss) are listed by :data:`REFERENCE_ONLY_PREFIXES`.
"""

from __future__ import annotations

from typing import Final

from torch import nn

from lucid_yolo.models import outputs as keys
from lucid_yolo.models.heads import Branch
from lucid_yolo.models.model import YOLO26

NECK_LAYOUT: Final = (
    ("top_down4", 2),  # after upsample P5, concat P4
    ("top_down3", 2),  # after upsample, concat P3
    ("down3", 0),
    ("bottom_up4", 1),  # after concat
    ("down4", 0),
    ("bottom_up5", 1),  # after concat
)
"""Neck modules in forward order, each with the number of parameter-free reference layers before
it."""

BRANCH_CONVS: Final = {keys.BOX: "cv2", keys.CLS: "cv3"}
"""Reference names of the box and class branches; every task branch is ``cv4``."""

TASK_BRANCH_CONV: Final = "cv4"
ONE_TO_ONE_PREFIX: Final = "one2one_"

OUTPUT_SUFFIXES: Final = {keys.KPT: "kpts", keys.KPT_SCALE: "sigma"}
"""Reference output conv suffix of each output of a multi-output branch (``cv4_kpts``)."""

PROTO_NAMES: Final = {"refine": "feat_refine", "fuse": "feat_fuse", "semantic": "semseg"}
"""Prototype submodules named differently in the reference (the others keep their names)."""

REFERENCE_ONLY_PREFIXES: Final = ("flow_model.",)
"""Head submodules of the reference that lucid-yolo has no counterpart for (relative to the head
layer)."""


def layer_prefixes(model: YOLO26) -> tuple[dict[str, str], int]:
    """Reference layer prefix of every backbone and neck layer, and the head layer's index.

    Returns:
        ``{"backbone.stem.0": "model.0", …, "neck.bottom_up5": "model.22"}`` and ``23``.
    """
    prefixes: dict[str, str] = {}
    index = 0
    for stage_name, stage in model.backbone.named_children():
        assert isinstance(stage, nn.Sequential), f"backbone stage {stage_name!r} is not a sequence"
        for position in range(len(stage)):
            prefixes[f"backbone.{stage_name}.{position}"] = f"model.{index}"
            index += 1
    neck_names = [name for name, _ in model.neck.named_children()]
    assert neck_names == [name for name, _ in NECK_LAYOUT], "NECK_LAYOUT is out of date"
    for name, free_layers in NECK_LAYOUT:
        index += free_layers
        prefixes[f"neck.{name}"] = f"model.{index}"
        index += 1
    return prefixes, index


def reference_names(model: YOLO26) -> dict[str, str]:
    """The reference key of every entry of ``model.state_dict()``, in its order.

    Args:
        model: the network (any device, ``meta`` included: only names are read).

    Returns:
        ``{lucid-yolo key: reference key}``, one to one.
    """
    prefixes, head_index = layer_prefixes(model)
    head = f"model.{head_index}."
    names: dict[str, str] = {}
    for key in model.state_dict():
        layer, _, rest = key.partition(".")
        if layer == "head":
            names[key] = head + _head_name(model, key)
        elif layer == "protos":
            module, _, tail = rest.partition(".")
            names[key] = f"{head}proto.{PROTO_NAMES.get(module, module)}.{tail}"
        else:
            prefix = ".".join(key.split(".")[:3] if layer == "backbone" else key.split(".")[:2])
            names[key] = prefixes[prefix] + key[len(prefix) :]
    return names


def _head_name(model: YOLO26, key: str) -> str:
    """The reference key of a head tensor, relative to the head layer."""
    # key: head.<o2m|o2o>.<branch>.trunk.<level>.<position>.<rest>
    #   or head.<o2m|o2o>.<branch>.out.<level>.<output>.<weight|bias>
    _, group, branch_name, part, level, *rest = key.split(".")
    conv = BRANCH_CONVS.get(branch_name, TASK_BRANCH_CONV)
    conv = (ONE_TO_ONE_PREFIX if group == keys.O2O else "") + conv
    group_module = model.head.o2o if group == keys.O2O else model.head.o2m
    branch = group_module[branch_name]
    assert isinstance(branch, Branch)
    if part == "trunk":
        position, *tail = rest
        index = int(position)
        # the class trunk's depthwise + pointwise pairs are nested one level deeper there
        where = f"{index // 2}.{index % 2}" if branch_name == keys.CLS else position
        return f"{conv}.{level}.{where}.{'.'.join(tail)}"
    output, tensor_name = rest
    if len(branch.names) > 1:
        return f"{conv}_{OUTPUT_SUFFIXES[output]}.{level}.{tensor_name}"
    trunk = branch.trunk[int(level)]
    assert isinstance(trunk, nn.Sequential)
    # the output conv follows the trunk in one sequence: after its convs (cls: its pairs)
    after = len(trunk) // 2 if branch_name == keys.CLS else len(trunk)
    return f"{conv}.{level}.{after}.{tensor_name}"


__all__ = [
    "BRANCH_CONVS",
    "NECK_LAYOUT",
    "ONE_TO_ONE_PREFIX",
    "OUTPUT_SUFFIXES",
    "PROTO_NAMES",
    "REFERENCE_ONLY_PREFIXES",
    "TASK_BRANCH_CONV",
    "layer_prefixes",
    "reference_names",
]
