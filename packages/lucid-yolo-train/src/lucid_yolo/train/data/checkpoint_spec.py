"""A checkpoint as a dataset description: the classes, task, size and data it was trained with.

:meth:`YoloDataModule.state_dict` stores the dataset metadata in every Lightning checkpoint (under
the data module's class name). Prediction needs that metadata and no labels, so a ``.ckpt`` path
is accepted where a dataset YAML is: it gives a :class:`DatasetSpec` without splits and the
training image size.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lucid_yolo.train.data.dataset_yaml import TASKS, DatasetSpec
from lucid_yolo.train.data.errors import DatasetConfigError

CHECKPOINT_SUFFIX = ".ckpt"
"""File suffix that marks a Lightning checkpoint (not a dataset YAML)."""


def is_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` names a Lightning checkpoint (by its suffix)."""
    return Path(path).suffix.lower() == CHECKPOINT_SUFFIX


@dataclass(frozen=True)
class CheckpointData:
    """The dataset metadata saved in a checkpoint.

    Attributes:
        spec: class names, task and keypoint layout; no splits (``spec.splits`` is empty).
        imgsz: the square input size the model was trained at, pixels.
        dataset_file: the dataset description the fit read (absolute), ``None`` when it had
            none (a dataset passed from Python) or the checkpoint predates the entry.
    """

    spec: DatasetSpec
    imgsz: int
    dataset_file: Path | None = None


def load_checkpoint_data(path: str | Path, key: str) -> CheckpointData:
    """Read the data module metadata of the checkpoint ``path``.

    Args:
        path: a ``.ckpt`` written by a fit with a :class:`YoloDataModule`.
        key: the entry the data module saved under (its class ``__qualname__``).

    Raises:
        DatasetConfigError: no such file, not a torch checkpoint, or one without the metadata.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise DatasetConfigError(f"{path}: no such checkpoint file; check the path")
    try:
        # mmap: only the small metadata entries are read, not every weight
        raw: Any = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError, ValueError) as error:
        raise DatasetConfigError(
            f"{path}: cannot be read as a checkpoint ({error}); pass a .ckpt written by a fit"
        ) from error
    state = raw.get(key) if isinstance(raw, dict) else None
    if not isinstance(state, dict) or state.get("task") not in TASKS or "names" not in state:
        raise DatasetConfigError(
            f"{path}: not a lucid-yolo checkpoint (no {key!r} entry with the class names and "
            "task); pass a .ckpt written by `lucid-yolo fit`"
        )
    kpt_shape = state.get("kpt_shape")
    flip_idx = state.get("flip_idx")
    spec = DatasetSpec(
        yaml_path=file,
        root=file.parent,
        splits={},
        names=tuple(str(name) for name in state["names"]),
        task=state["task"],
        kpt_shape=None if kpt_shape is None else (int(kpt_shape[0]), int(kpt_shape[1])),
        flip_idx=None if flip_idx is None else tuple(int(i) for i in flip_idx),
    )
    dataset_file = state.get("dataset_file")
    return CheckpointData(
        spec=spec,
        imgsz=int(state["imgsz"]),
        dataset_file=None if dataset_file is None else Path(dataset_file),
    )


__all__ = ["CHECKPOINT_SUFFIX", "CheckpointData", "is_checkpoint", "load_checkpoint_data"]
