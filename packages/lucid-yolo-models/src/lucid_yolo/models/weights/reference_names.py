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
  branch with several outputs (pose: keypoints and their scales) has one output conv per output
  in the reference, ``cv4_kpts`` and ``cv4_sigma``, whose rows are the row blocks of lucid-yolo's
  single output conv.
- **Prototypes** (``model.23.proto``): the same modules, three renamed (:data:`PROTO_NAMES`).

Reference tensors with no counterpart here (the pose head's RealNVP flow, used only by the
reference's keypoint loss) are listed by :data:`REFERENCE_ONLY_PREFIXES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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
"""Reference output conv suffix of each output of a multi-output branch."""

PROTO_NAMES: Final = {"refine": "feat_refine", "fuse": "feat_fuse", "semantic": "semseg"}
"""Prototype submodules named differently in the reference (the others keep their names)."""

REFERENCE_ONLY_PREFIXES: Final = ("flow_model.",)
"""Head submodules of the reference that lucid-yolo has no counterpart for (relative to the head
layer)."""


@dataclass(frozen=True)
class Piece:
    """One reference tensor holding the rows ``[start, start + rows)`` of a lucid-yolo tensor.

    Attributes:
        name: the reference key.
        start: first row (dim 0) of the lucid-yolo tensor it holds.
        rows: how many rows.
    """

    name: str
    start: int
    rows: int


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


def reference_names(model: YOLO26) -> dict[str, tuple[Piece, ...]]:
    """The reference tensors of every entry of ``model.state_dict()``, in its order.

    Args:
        model: the network (any device, ``meta`` included: only names and shapes are read).

    Returns:
        ``{lucid-yolo key: (Piece, …)}``; all but the pose output convs map to one piece.
    """
    prefixes, head_index = layer_prefixes(model)
    head = f"model.{head_index}."
    names: dict[str, tuple[Piece, ...]] = {}
    for key, tensor in model.state_dict().items():
        rows = tensor.shape[0] if tensor.dim() else 0
        layer, _, rest = key.partition(".")
        if layer == "head":
            names[key] = _head_pieces(model, key, head, rows)
        elif layer == "protos":
            module, _, tail = rest.partition(".")
            names[key] = (Piece(f"{head}proto.{PROTO_NAMES.get(module, module)}.{tail}", 0, rows),)
        else:
            prefix = ".".join(key.split(".")[:3] if layer == "backbone" else key.split(".")[:2])
            names[key] = (Piece(prefixes[prefix] + key[len(prefix) :], 0, rows),)
    return names


def _head_pieces(model: YOLO26, key: str, head: str, rows: int) -> tuple[Piece, ...]:
    # key: head.<o2m|o2o>.<branch>.<trunk|out>.<level>.<rest>
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
        return (Piece(f"{head}{conv}.{level}.{where}.{'.'.join(tail)}", 0, rows),)
    (tensor_name,) = rest
    trunk = branch.trunk[int(level)]
    assert isinstance(trunk, nn.Sequential)
    if len(branch.names) == 1:
        # the output conv follows the trunk in one sequence: after its convs (cls: its pairs)
        after = len(trunk) // 2 if branch_name == keys.CLS else len(trunk)
        return (Piece(f"{head}{conv}.{level}.{after}.{tensor_name}", 0, rows),)
    return _split_output(head, conv, level, tensor_name, branch.names, branch.sizes)


def _split_output(
    head: str,
    conv: str,
    level: str,
    tensor_name: str,
    names: Sequence[str],
    sizes: Sequence[int],
) -> tuple[Piece, ...]:
    pieces: list[Piece] = []
    start = 0
    for name, size in zip(names, sizes, strict=True):
        pieces.append(
            Piece(f"{head}{conv}_{OUTPUT_SUFFIXES[name]}.{level}.{tensor_name}", start, size)
        )
        start += size
    return tuple(pieces)


__all__ = [
    "BRANCH_CONVS",
    "NECK_LAYOUT",
    "ONE_TO_ONE_PREFIX",
    "OUTPUT_SUFFIXES",
    "PROTO_NAMES",
    "REFERENCE_ONLY_PREFIXES",
    "TASK_BRANCH_CONV",
    "Piece",
    "layer_prefixes",
    "reference_names",
]
