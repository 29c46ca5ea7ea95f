"""Pretrained weights into a lucid-yolo network: Ultralytics ``.pt``, state dicts, safetensors.

:func:`read_weights` reads a file into :class:`ImportedWeights`: the tensors under lucid-yolo's
names and what the network they came from was (task, scale, classes, keypoints, prototypes), all
taken from the tensors themselves:

- the task from which head branches exist (prototypes: segment; a keypoint output: pose; a
  task branch otherwise: OBB; none: detect);
- classes, keypoints and prototypes from the output convs' row counts;
- the scale by building each candidate network on the ``meta`` device (no memory, no compute)
  and keeping the one whose every tensor name and shape matches. Candidates are the registered
  scales and, for an Ultralytics checkpoint, the scale its build configuration names (so a
  checkpoint of a custom width loads too).

:func:`load_weights` then copies them into a network, refusing another task or scale in one
line that names both, and keeping every tensor but the class-count-dependent ones when only the
class count differs (fine-tuning on a new dataset), which its :class:`WeightsReport` says.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lucid_yolo.models import outputs as keys
from lucid_yolo.models.exceptions import WeightsError
from lucid_yolo.models.model import YOLO26, Task
from lucid_yolo.models.registry import TASK_SUFFIXES
from lucid_yolo.models.scales import SCALES, Scale
from lucid_yolo.models.weights.checkpoint_pickle import read_pickled_checkpoint
from lucid_yolo.models.weights.reference_names import REFERENCE_ONLY_PREFIXES, reference_names
from lucid_yolo.models.weights.safetensors_file import read_safetensors

CLASS_DEPENDENT_PREFIXES = ("head.o2m.cls.", "head.o2o.cls.", "protos.semantic.")
"""Where tensor shapes depend on the class count: the class branches (their trunk width is
``max(P3 width, min(C, 100))``) and the semantic-segmentation logits."""


@dataclass(frozen=True)
class ImportedWeights:
    """A network's weights under lucid-yolo names and what that network was.

    Attributes:
        source: the file they were read from.
        task: the network's task.
        scale: its size (a registered scale, or the custom one its configuration named).
        num_classes: classes ``C``.
        kpt_shape: pose: ``(K, 3)``; other tasks: the default ``(17, 3)``.
        num_masks: segment: prototypes ``M``; other tasks: the default 32.
        tensors: the state dict in lucid-yolo names, as stored (an Ultralytics ``.pt`` holds
            float16).
        dropped: reference tensors with no lucid-yolo counterpart (the pose flow).
        class_names: class names by id, when the file carries them.
    """

    source: str
    task: Task
    scale: Scale
    num_classes: int
    kpt_shape: tuple[int, int]
    num_masks: int
    tensors: dict[str, Tensor] = field(repr=False)
    dropped: tuple[str, ...] = ()
    class_names: tuple[str, ...] | None = None

    @property
    def model_name(self) -> str:
        """The registered name of the network (``yolo26n-pose``), or a description of a
        custom scale."""
        return model_name(self.task, self.scale)

    def build(self) -> YOLO26:
        """A network of the same task, scale, classes, keypoints and prototypes (fresh
        weights, on the current default device)."""
        return YOLO26(
            self.task,
            self.scale,
            num_classes=self.num_classes,
            kpt_shape=self.kpt_shape,
            num_masks=self.num_masks,
        )


@dataclass(frozen=True)
class WeightsReport:
    """What :func:`load_weights` did.

    Attributes:
        source: the weights file.
        loaded: lucid-yolo tensors taken from the file.
        reinitialised: tensors kept at the network's own initialisation because their shape
            depends on a class count that differs from the file's.
        dropped: file tensors with no lucid-yolo counterpart.
        file_classes: the file's class count.
        model_classes: the network's class count.
    """

    source: str
    loaded: int
    reinitialised: tuple[str, ...]
    dropped: tuple[str, ...]
    file_classes: int
    model_classes: int

    def summary(self) -> str:
        """One line for the log."""
        line = f"loaded {self.loaded} tensors from {self.source}"
        if self.reinitialised:
            line += (
                f"; the file has {self.file_classes} classes and the model "
                f"{self.model_classes}: kept every tensor but the {len(self.reinitialised)} "
                "class-count-dependent ones of the class branches, which start fresh"
            )
        if self.dropped:
            line += (
                f"; ignored {len(self.dropped)} reference-only tensors ({_groups(self.dropped)})"
            )
        return line


def model_name(task: Task, scale: Scale) -> str:
    """``yolo26<scale><suffix>`` for a registered scale, else the custom multipliers."""
    if SCALES.get(scale.name) == scale:
        return f"yolo26{scale.name}{TASK_SUFFIXES[task]}"
    return (
        f"yolo26{TASK_SUFFIXES[task]} at a custom scale (depth={scale.depth}, "
        f"width={scale.width}, max_channels={scale.max_channels})"
    )


def read_weights(path: str | Path) -> ImportedWeights:
    """Read pretrained weights: an Ultralytics ``.pt``, a state dict or a ``.safetensors`` file.

    State dicts and safetensors files may use Ultralytics names (``model.0.conv.weight``) or
    lucid-yolo names (``backbone.stem.0.conv.weight``).

    Raises:
        WeightsError: the file is missing, unsafe, or its tensors fit no YOLO26 network.

    Example:
        >>> weights = read_weights("yolo26n.pt")  # doctest: +SKIP
        >>> model = weights.build()
        >>> load_weights(model, weights).summary()  # doctest: +SKIP
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise WeightsError(
            f"weights file {str(path)!r} does not exist; pass an Ultralytics .pt (e.g. "
            "yolo26n.pt), a state dict or a .safetensors file"
        )
    config: Mapping[str, Any] | None = None
    class_names: tuple[str, ...] | None = None
    if file.suffix == ".safetensors":
        tensors = read_safetensors(file)
    else:
        checkpoint = read_pickled_checkpoint(file)
        tensors, config, class_names = (
            checkpoint.tensors,
            checkpoint.config,
            checkpoint.class_names,
        )
    return _identify(str(path), tensors, config, class_names)


def _identify(
    source: str,
    tensors: dict[str, Tensor],
    config: Mapping[str, Any] | None,
    class_names: tuple[str, ...] | None,
) -> ImportedWeights:
    reference = not any(key.startswith("backbone.") for key in tensors)
    task, num_classes, kpt_shape, num_masks = _head_shape(source, tensors, reference)
    for scale in _candidate_scales(config):
        with torch.device("meta"):
            model = YOLO26(
                task, scale, num_classes=num_classes, kpt_shape=kpt_shape, num_masks=num_masks
            )
        converted = _convert(model, tensors) if reference else _matching(model, tensors)
        if converted is not None:
            ours, dropped = converted
            names = class_names if class_names and len(class_names) == num_classes else None
            return ImportedWeights(
                source, task, scale, num_classes, kpt_shape, num_masks, ours, dropped, names
            )
    raise WeightsError(
        f"{source!r}: its {len(tensors)} tensors fit no YOLO26 {task} network at any scale "
        f"({', '.join(SCALES)}); is it a YOLO26 checkpoint (not YOLO11 or YOLOv8)?"
    )


def _head_shape(
    source: str, tensors: Mapping[str, Tensor], reference: bool
) -> tuple[Task, int, tuple[int, int], int]:
    """Task, classes, keypoint shape and prototypes from the head's output convs."""

    def rows(*candidates: str) -> int | None:
        for key in candidates:
            for name, tensor in tensors.items():
                if name.endswith(key) and (not reference or name.startswith("model.")):
                    return int(tensor.shape[0])
        return None

    if reference:
        num_classes = rows(".cv3.0.2.weight")
        kpt_rows = rows(".cv4_kpts.0.weight")
        mask_rows = rows(".proto.cv3.conv.weight")
        task_rows = rows(".cv4.0.2.weight")
    else:
        num_classes = rows(f"head.o2m.cls.out.0.{keys.CLS}.weight")
        kpt_rows = rows(f"head.o2m.{keys.KPT}.out.0.{keys.KPT}.weight")
        mask_rows = rows("protos.cv3.conv.weight")
        task_rows = rows(f"head.o2m.{keys.ANGLE}.out.0.{keys.ANGLE}.weight")
    if num_classes is None:
        raise WeightsError(
            f"{source!r} has no class output conv; it is not a YOLO26 detect, segment, pose or "
            "OBB network (classification and other heads cannot be imported)"
        )
    default_kpt, default_masks = (17, 3), 32
    if mask_rows is not None:
        return "segment", num_classes, default_kpt, mask_rows
    if kpt_rows is not None:
        if kpt_rows % 3:
            raise WeightsError(
                f"{source!r}: {kpt_rows} keypoint rows are not (x, y, visibility) triples; "
                "lucid-yolo pose models need kpt_shape (K, 3)"
            )
        num_keypoints = kpt_rows // 3
        return "pose", num_classes, (num_keypoints, 3), default_masks
    if task_rows is not None:
        return "obb", num_classes, default_kpt, default_masks
    return "detect", num_classes, default_kpt, default_masks


def _candidate_scales(config: Mapping[str, Any] | None) -> Iterator[Scale]:
    named = _configured_scale(config)
    if named is not None:
        yield named
    yield from (scale for scale in SCALES.values() if scale != named)


def _configured_scale(config: Mapping[str, Any] | None) -> Scale | None:
    """The scale an Ultralytics build configuration names: ``scales[scale]`` is
    ``[depth, width, max_channels]``; m, l and x use nested C3k blocks throughout."""
    if not config:
        return None
    letter, table = config.get("scale"), config.get("scales")
    if not isinstance(letter, str) or not isinstance(table, dict) or letter not in table:
        return None
    try:
        depth, width, max_channels = table[letter]
        scale = Scale(letter, float(depth), float(width), int(max_channels), letter in "mlx")
    except (TypeError, ValueError):
        return None
    registered = SCALES.get(letter)
    return registered if registered == scale else scale


def _convert(
    model: YOLO26, tensors: Mapping[str, Tensor]
) -> tuple[dict[str, Tensor], tuple[str, ...]] | None:
    """Reference-named tensors → lucid-yolo names, or ``None`` when they do not fit ``model``."""
    shapes = {key: tuple(t.shape) for key, t in model.state_dict().items()}
    ours: dict[str, Tensor] = {}
    used: set[str] = set()
    for key, name in reference_names(model).items():
        tensor = tensors.get(name)
        if tensor is None or tuple(tensor.shape) != shapes[key]:
            return None
        ours[key] = tensor
        used.add(name)
    head = f"model.{max(int(k.split('.')[1]) for k in used if k.startswith('model.'))}."
    unused = [key for key in tensors if key not in used]
    if any(not key.startswith(tuple(head + p for p in REFERENCE_ONLY_PREFIXES)) for key in unused):
        return None
    return ours, tuple(unused)


def _matching(
    model: YOLO26, tensors: Mapping[str, Tensor]
) -> tuple[dict[str, Tensor], tuple[str, ...]] | None:
    """Lucid-yolo-named tensors, when their names and shapes are exactly ``model``'s."""
    shapes = {key: tuple(t.shape) for key, t in model.state_dict().items()}
    if shapes != {key: tuple(t.shape) for key, t in tensors.items()}:
        return None
    return dict(tensors), ()


def load_weights(model: YOLO26, weights: ImportedWeights) -> WeightsReport:
    """Copy ``weights`` into ``model`` (converted to its dtype and device).

    Raises:
        WeightsError: the task, scale, keypoint shape or prototype count differs (the message
            names both networks and the fix).
    """
    target = model_name(model.task, model.scale)
    if model.task != weights.task or model.scale != weights.scale:
        raise WeightsError(
            f"{weights.source!r} holds a {weights.model_name} but the model is {target}; "
            f"choose the matching model (e.g. --model.model {weights.model_name})"
        )
    if model.task == "pose" and model.kpt_shape != weights.kpt_shape:
        raise WeightsError(
            f"{weights.source!r} has kpt_shape {weights.kpt_shape!r} but the model "
            f"{model.kpt_shape!r}; use a dataset with the same keypoints"
        )
    if model.task == "segment" and model.num_masks != weights.num_masks:
        raise WeightsError(
            f"{weights.source!r} has {weights.num_masks} prototypes but the model "
            f"{model.num_masks}; build the model with num_masks={weights.num_masks}"
        )
    state = model.state_dict()
    merged: dict[str, Tensor] = {}
    reinitialised: list[str] = []
    for key, own in state.items():
        incoming = weights.tensors[key]
        if incoming.shape == own.shape:
            merged[key] = incoming
        elif key.startswith(CLASS_DEPENDENT_PREFIXES):
            merged[key] = own
            reinitialised.append(key)
        else:  # the task and scale match, so only class-dependent shapes can differ
            raise AssertionError(f"{key}: {tuple(incoming.shape)} vs {tuple(own.shape)}")
    model.load_state_dict(merged, strict=True)
    return WeightsReport(
        source=weights.source,
        loaded=len(state) - len(reinitialised),
        reinitialised=tuple(reinitialised),
        dropped=weights.dropped,
        file_classes=weights.num_classes,
        model_classes=model.num_classes,
    )


def _groups(names: tuple[str, ...]) -> str:
    return ", ".join(sorted({".".join(name.split(".")[:3]) for name in names}))


__all__ = [
    "CLASS_DEPENDENT_PREFIXES",
    "ImportedWeights",
    "WeightsReport",
    "load_weights",
    "model_name",
    "read_weights",
]
