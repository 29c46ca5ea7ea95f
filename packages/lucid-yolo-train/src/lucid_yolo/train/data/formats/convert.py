"""Ultralytics ⇄ COCO conversion (the CLI's ``data convert``).

Ultralytics → COCO writes one json per split, ``file_name`` relative to the deepest folder that
holds all the split's images (``images/train`` in the usual layout), and returns that folder with
the json: the pair is what :func:`~.coco.read_coco` and :func:`coco_to_ultralytics` take.
COCO → Ultralytics copies (or links) each image
to ``out/images/<split>/<file_name>``, writes its rows to ``out/labels/<split>/...txt`` and a
``data.yaml`` with the names (and, for pose, ``kpt_shape`` and ``flip_idx``).

``flip_idx`` travels through COCO as keypoint names: a pair ``i ↔ j`` is written ``left_i`` /
``right_i`` and a keypoint that maps to itself ``kpt_i``, which :func:`~.coco.flip_idx_from_names`
reads back.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml

from lucid_yolo.train.data.dataset_yaml import Task, load_dataset_yaml
from lucid_yolo.train.data.errors import BadInputPolicy, DatasetConfigError
from lucid_yolo.train.data.formats.coco import CocoDataset, read_coco
from lucid_yolo.train.data.formats.coco_writer import write_coco
from lucid_yolo.train.data.formats.ultralytics import label_path_for, load_split, write_label_file


def keypoint_names_from_flip(flip_idx: tuple[int, ...]) -> tuple[str, ...]:
    """Keypoint names that encode ``flip_idx`` (module docstring)."""
    names = [f"kpt_{i}" for i in range(len(flip_idx))]
    for i, j in enumerate(flip_idx):
        if i < j:
            names[i], names[j] = f"left_{i}", f"right_{i}"
    return tuple(names)


def ultralytics_to_coco(
    data_yaml: str | Path,
    out_dir: str | Path,
    *,
    task: Task | None = None,
    splits: tuple[str, ...] | None = None,
    policy: BadInputPolicy = "fail",
) -> dict[str, tuple[Path, Path]]:
    """Convert an Ultralytics dataset's splits to COCO json files.

    Args:
        data_yaml: the dataset YAML.
        out_dir: where ``<split>.json`` files are written.
        task: ``detect``, ``segment`` or ``pose`` (default: the YAML's).
        splits: which splits (default: every split the YAML names).
        policy: bad-input policy while reading (``skip`` leaves bad images out of the json).

    Returns:
        Split name → ``(json_path, images_dir)``.

    Raises:
        DatasetConfigError: the YAML is invalid or the task is ``obb``.
    """
    spec = load_dataset_yaml(data_yaml, task=task)
    if spec.task == "obb":
        raise DatasetConfigError(
            f"{spec.yaml_path}: COCO json has no oriented boxes; keep OBB data as Ultralytics txt"
        )
    keypoint_names = None
    if spec.kpt_shape is not None:
        flip = spec.flip_idx or tuple(range(spec.kpt_shape[0]))
        keypoint_names = keypoint_names_from_flip(flip)
    written: dict[str, tuple[Path, Path]] = {}
    for split in splits or tuple(spec.splits):
        labels = load_split(spec, split, policy=policy)
        parents = [str(x.image_path.resolve().parent) for x in labels]
        images_dir = Path(os.path.commonpath(parents)) if parents else spec.root
        json_path = write_coco(
            labels,
            Path(out_dir) / f"{split}.json",
            names=spec.names,
            task=spec.task,
            images_root=images_dir,
            keypoint_names=keypoint_names,
        )
        written[split] = (json_path, images_dir)
    return written


def _place_image(source: Path, target: Path, link: bool) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() or target.is_symlink():
        target.unlink()
    if link:
        os.symlink(source, target)
    else:
        shutil.copy2(source, target)


def coco_to_ultralytics(
    splits: dict[str, tuple[str | Path, str | Path]],
    out_dir: str | Path,
    *,
    task: Task = "detect",
    policy: BadInputPolicy = "fail",
    link_images: bool = False,
) -> Path:
    """Convert COCO json splits to the Ultralytics layout.

    Args:
        splits: split name → ``(json_path, images_dir)``; must include ``train`` and ``val``
            (they may be the same pair).
        out_dir: the new dataset root.
        task: ``detect``, ``segment`` or ``pose``.
        policy: bad-input policy while reading (``skip`` leaves bad images out).
        link_images: symlink the images instead of copying them.

    Returns:
        The written ``data.yaml``.

    Raises:
        DatasetConfigError: ``train`` or ``val`` is missing, or the splits disagree on classes.
    """
    missing = {"train", "val"} - set(splits)
    if missing:
        raise DatasetConfigError(
            f"splits {sorted(splits)!r} lack {sorted(missing)!r}; pass both train and val"
        )
    root = Path(out_dir).expanduser().resolve()
    first: CocoDataset | None = None
    for split, (json_path, images_dir) in splits.items():
        dataset = read_coco(json_path, images_dir, task=task, policy=policy)
        if first is not None and dataset.names != first.names:
            raise DatasetConfigError(
                f"{json_path}: categories {dataset.names!r} differ from {first.names!r} of the "
                "first split; convert splits that share categories"
            )
        first = first or dataset
        base = Path(images_dir).expanduser().resolve()
        for labels in dataset.labels:
            relative = labels.image_path.relative_to(base)
            image = root / "images" / split / relative
            _place_image(labels.image_path, image, link_images)
            write_label_file(label_path_for(image), labels, task)
    assert first is not None
    data: dict[str, object] = {
        "path": str(root),
        **{split: f"images/{split}" for split in splits},
        "task": task,
        "names": list(first.names),
    }
    if first.kpt_shape is not None:
        data["kpt_shape"] = list(first.kpt_shape)
        data["flip_idx"] = list(first.flip_idx or ())
    path = root / "data.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


__all__ = ["coco_to_ultralytics", "keypoint_names_from_flip", "ultralytics_to_coco"]
