"""Labels already read into memory, with their class metadata: the data module's second input.

The dataset YAML path covers the Ultralytics layout; COCO json, DOTA folders or labels built in code
are read by their own loaders (:mod:`lucid_yolo.train.data.formats`) and handed over as a
:class:`PreparedDataset`, so the data module does not need to know every format.

Example:
    >>> train = read_coco("train.json", "images/train", task="segment")  # doctest: +SKIP
    >>> val = read_coco("val.json", "images/val", task="segment")  # doctest: +SKIP
    >>> data = PreparedDataset(  # doctest: +SKIP
    ...     {"train": train.labels, "val": val.labels}, names=train.names, task="segment"
    ... )
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lucid_yolo.train.data.dataset_yaml import TASKS, Task
from lucid_yolo.train.data.errors import DatasetConfigError
from lucid_yolo.train.data.labels import ImageLabels


@dataclass(frozen=True)
class PreparedDataset:
    """Splits of in-memory labels and the metadata a YAML would give.

    Attributes:
        splits: split name (``train``, ``val``, ``test``) -> one :class:`ImageLabels` per image.
        names: class names, index = class id.
        task: which label fields the entries carry.
        kpt_shape: pose only: ``(K, D)``.
        flip_idx: pose only: left-right keypoint permutation.
        source: where the labels came from, for messages.

    Raises:
        DatasetConfigError: an unknown task, no ``train``/``val`` split, or pose without
            ``kpt_shape``.
    """

    splits: Mapping[str, Sequence[ImageLabels]]
    names: tuple[str, ...]
    task: Task
    kpt_shape: tuple[int, int] | None = None
    flip_idx: tuple[int, ...] | None = None
    source: str = "<prepared dataset>"

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise DatasetConfigError(f"{self.source}: task {self.task!r} is not one of {TASKS!r}")
        if self.task == "pose" and self.kpt_shape is None:
            raise DatasetConfigError(
                f"{self.source}: task 'pose' needs kpt_shape=(K, 3) (and flip_idx)"
            )
        for split in ("train", "val"):
            if split not in self.splits:
                raise DatasetConfigError(
                    f"{self.source}: no {split!r} split among {sorted(self.splits)!r}; "
                    f"pass splits={{'train': ..., 'val': ...}}"
                )

    @property
    def num_classes(self) -> int:
        """Number of classes, ``len(names)``."""
        return len(self.names)


__all__ = ["PreparedDataset"]
