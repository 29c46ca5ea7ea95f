"""A COCO dataset as a training source: a small YAML that names one json + image folder per split.

COCO ships one annotation file per split, not a dataset YAML, so the data module cannot find the
splits by itself. This file gives it what an Ultralytics YAML would::

    format: coco                 # marks the file as a COCO description
    path: /data/coco             # optional; relative paths below start here (default: this folder)
    crowd: drop                  # optional: drop | ignore (see lucid_yolo.train.data.formats.coco)
    train: {json: annotations/instances_train2017.json, images: train2017}
    val: {json: annotations/instances_val2017.json, images: val2017}
    test: {json: annotations/image_info_test2017.json, images: test2017}   # optional

Every split must use the same categories (names and order), so that a class id means one thing in
training and validation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lucid_yolo.train.data.dataset_yaml import Task
from lucid_yolo.train.data.errors import BadInputPolicy, DatasetConfigError
from lucid_yolo.train.data.formats.coco import CocoDataset, read_coco
from lucid_yolo.train.data.prepared import PreparedDataset

COCO_FORMAT = "coco"
"""The value of the YAML's ``format`` key that marks a COCO description."""


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DatasetConfigError(f"{path}: cannot read the dataset YAML ({first_line})") from None
    return raw if isinstance(raw, dict) else {}


def is_coco_yaml(path: str | Path) -> bool:
    """Whether ``path`` is a YAML file whose ``format`` is ``coco``.

    An unreadable file is not a COCO description; the Ultralytics loader then reports it.
    """
    file = Path(path)
    if file.suffix not in (".yaml", ".yml") or not file.is_file():
        return False
    try:
        return _read_yaml(file).get("format") == COCO_FORMAT
    except DatasetConfigError:
        return False


def load_coco_yaml(
    path: str | Path, *, task: Task = "detect", policy: BadInputPolicy = "fail"
) -> PreparedDataset:
    """Read every split a COCO description names.

    Args:
        path: the YAML (module docstring).
        task: ``detect``, ``segment`` or ``pose``.
        policy: bad annotations and images: ``fail`` raises, ``skip`` warns and leaves them out.

    Returns:
        The splits' labels with the class metadata of the training json.

    Raises:
        DatasetConfigError: a missing ``train``/``val`` entry, a split entry without ``json`` or
            ``images``, an unknown ``crowd`` value, or splits whose categories differ.
    """
    file = Path(path)
    raw = _read_yaml(file)
    root = Path(raw.get("path") or file.parent)
    if not root.is_absolute():
        root = file.parent / root
    crowd = raw.get("crowd", "drop")
    if crowd not in ("drop", "ignore"):
        raise DatasetConfigError(f"{file}: crowd {crowd!r} is not 'drop' or 'ignore'")
    read: dict[str, CocoDataset] = {}
    for split in ("train", "val", "test"):
        entry = raw.get(split)
        if entry is None:
            if split == "test":
                continue
            raise DatasetConfigError(
                f"{file}: no `{split}` entry; add `{split}: {{json: <annotations.json>, "
                "images: <image folder>}`"
            )
        if not isinstance(entry, dict) or "json" not in entry or "images" not in entry:
            raise DatasetConfigError(
                f"{file}: `{split}` is {entry!r}; expected a mapping with `json` and `images`"
            )
        read[split] = read_coco(
            root / str(entry["json"]),
            root / str(entry["images"]),
            task=task,
            policy=policy,
            crowd=crowd,
        )
    train = read["train"]
    for split, dataset in read.items():
        if dataset.names != train.names:
            raise DatasetConfigError(
                f"{file}: `{split}` has categories {list(dataset.names)!r} but `train` has "
                f"{list(train.names)!r}; use the same category list in every split"
            )
    return PreparedDataset(
        {split: dataset.labels for split, dataset in read.items()},
        names=train.names,
        task=task,
        kpt_shape=train.kpt_shape,
        flip_idx=train.flip_idx,
        source=str(file),
    )


__all__ = ["COCO_FORMAT", "is_coco_yaml", "load_coco_yaml"]
