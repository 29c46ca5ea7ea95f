"""Models by name: ``yolo26{n,s,m,l,x}[-seg|-pose|-obb]`` and the one ``create_model`` entry.

Every variant is registered under exactly its name; :func:`create_model` is the only place that
turns a name and overrides into a network.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Final

import torch

from lucid_yolo.models.exceptions import UnknownModelError
from lucid_yolo.models.model import YOLO26, Task
from lucid_yolo.models.scales import SCALES, Scale

TASK_SUFFIXES: Final[dict[Task, str]] = {
    "detect": "",
    "segment": "-seg",
    "pose": "-pose",
    "obb": "-obb",
}
TASK_IMAGE_SIZES: Final[dict[Task, int]] = {
    "detect": 640,
    "segment": 640,
    "pose": 640,
    "obb": 1024,
}
"""Input size of the published tables per task (OBB is trained and measured on DOTA at 1024)."""


@dataclass(frozen=True)
class ModelSpec:
    """What a registered name stands for.

    Attributes:
        name: the registered name, e.g. ``yolo26s-seg``.
        task: the task.
        scale: the size.
        image_size: the task's nominal square input size in pixels.
    """

    name: str
    task: Task
    scale: Scale
    image_size: int


MODELS: Final[dict[str, ModelSpec]] = {
    f"yolo26{letter}{suffix}": ModelSpec(
        f"yolo26{letter}{suffix}", task, scale, TASK_IMAGE_SIZES[task]
    )
    for task, suffix in TASK_SUFFIXES.items()
    for letter, scale in SCALES.items()
}


def list_models() -> list[str]:
    """Every registered name, detect first, then segment, pose and OBB, each n → x."""
    return list(MODELS)


def model_spec(name: str) -> ModelSpec:
    """Look up a registered name.

    Raises:
        UnknownModelError: when ``name`` is not registered; the message suggests close names.
    """
    try:
        return MODELS[name]
    except KeyError:
        close = difflib.get_close_matches(name, MODELS, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownModelError(
            f"unknown model {name!r}; {hint or 'see list_models()'} (names are "
            "yolo26{n,s,m,l,x} with an optional -seg, -pose or -obb suffix)"
        ) from None


def create_model(
    name: str,
    *,
    num_classes: int = 80,
    kpt_shape: tuple[int, int] = (17, 3),
    num_masks: int = 32,
    in_channels: int = 3,
    seed: int | None = 0,
) -> YOLO26:
    """Build a registered model with freshly initialised weights.

    Args:
        name: a registered name, e.g. ``yolo26n``, ``yolo26s-seg``, ``yolo26m-pose``,
            ``yolo26x-obb``.
        num_classes: classes ``C``.
        kpt_shape: pose only: ``(K, 3)``.
        num_masks: segment only: prototypes ``M``.
        in_channels: image channels.
        seed: the initial weights depend only on this seed (the global RNG is left untouched);
            ``None`` draws from the global RNG instead.

    Returns:
        The network in training mode on the current default device.

    Raises:
        UnknownModelError: on an unregistered name.
        ModelConfigError: on arguments that cannot build the network.

    Example:
        >>> model = create_model("yolo26n", num_classes=3)
        >>> model.strides
        (8, 16, 32)
    """
    spec = model_spec(name)

    def build() -> YOLO26:
        return YOLO26(
            spec.task,
            spec.scale,
            num_classes=num_classes,
            kpt_shape=kpt_shape,
            num_masks=num_masks,
            in_channels=in_channels,
        )

    if seed is None:
        return build()
    # manual_seed reseeds every device's generator: fork them all so the caller's are restored
    cuda_devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=cuda_devices):
        torch.manual_seed(seed)
        return build()


__all__ = [
    "MODELS",
    "TASK_IMAGE_SIZES",
    "ModelSpec",
    "create_model",
    "list_models",
    "model_spec",
]
