"""The Ultralytics dataset YAML, read into a resolved :class:`DatasetSpec`.

Keys understood (the Ultralytics layout, unchanged):

``path``
    Dataset root. A relative ``path`` is resolved against the YAML file's folder (not the current
    directory, so a dataset works wherever it is launched from); no ``path`` means that folder.
``train``, ``val``, ``test``
    Each a folder of images, an image-list ``.txt`` (one path a line) or a list of those,
    relative to the root. ``train`` and ``val`` are required, ``test`` is optional; a ``null``
    split is absent.
``names``
    Class names: a list, or a dict ``{0: name, 1: name, ...}`` with keys ``0..n-1``. Required.
``nc``
    Optional class count; must equal ``len(names)``.
``kpt_shape``, ``flip_idx``
    Pose: ``[K, 2]`` or ``[K, 3]`` (x, y[, visibility]) and the horizontal-flip permutation of the K
    keypoints (``flip_idx[i]`` is the keypoint that ``i`` becomes under a left-right flip).
``task`` (lucid-yolo extension)
    ``detect``, ``segment``, ``pose`` or ``obb``; Ultralytics ignores it. When neither the caller
    nor the YAML names the task, ``kpt_shape`` implies ``pose`` and anything else ``detect``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml

from lucid_yolo.train.data.errors import DatasetConfigError, path_text

Task = Literal["detect", "segment", "pose", "obb"]
TASKS: tuple[Task, ...] = ("detect", "segment", "pose", "obb")
SPLITS: tuple[str, ...] = ("train", "val", "test")


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset YAML with every path resolved and every field checked.

    Attributes:
        yaml_path: the YAML file this came from, for messages (``None`` when built in code).
        root: the dataset root (``path``), absolute.
        splits: split name → sources (absolute image folders or image-list ``.txt`` files);
            ``train`` and ``val`` are always present in a YAML's spec, ``test`` only when the
            YAML names it; a checkpoint's spec (:mod:`.checkpoint_spec`) has no split.
        names: class names, index = class id.
        task: which labels the rows carry.
        kpt_shape: pose only: ``(K, D)`` with ``D`` 2 (x, y) or 3 (x, y, visibility).
        flip_idx: pose only: the left-right flip permutation of the K keypoints, or ``None`` when
            the YAML gives none (then flip augmentation must keep keypoints in place or be off).
    """

    yaml_path: Path | None
    root: Path
    splits: Mapping[str, tuple[Path, ...]]
    names: tuple[str, ...]
    task: Task
    kpt_shape: tuple[int, int] | None = None
    flip_idx: tuple[int, ...] | None = None

    @property
    def num_classes(self) -> int:
        """Number of classes, ``len(names)``."""
        return len(self.names)


def _fail(path: Path, message: str) -> DatasetConfigError:
    return DatasetConfigError(f"{path_text(path)}: {message}")


def _syntax_error(path: Path, error: yaml.YAMLError) -> DatasetConfigError:
    """One line, ``file:line: ... at column c: what``, from PyYAML's multi-line message."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    where = path_text(path) if mark is None else f"{path_text(path)}:{mark.line + 1}"
    column = "" if mark is None else f" at column {mark.column + 1}"
    what = getattr(error, "problem", None) or type(error).__name__
    context = getattr(error, "context", None)
    detail = f"{what} ({context})" if context else str(what)
    return DatasetConfigError(
        f"{where}: not valid YAML{column}: {detail}; fix the syntax there (indentation, a "
        "missing `:` or an unclosed quote or bracket)"
    )


def _parse_names(raw: object, nc: object, path: Path) -> tuple[str, ...]:
    if raw is None:
        raise _fail(path, "no `names`; add the class names, e.g. `names: [cat, dog]`")
    if isinstance(raw, list):
        names = tuple(str(n) for n in raw)
    elif isinstance(raw, dict):
        keys = sorted(raw)
        if keys != list(range(len(keys))):
            raise _fail(path, f"`names` keys must be 0..{len(keys) - 1}, got {keys!r}")
        names = tuple(str(raw[k]) for k in keys)
    else:
        raise _fail(path, f"`names` must be a list or a dict of id: name, got {raw!r}")
    if not names:
        raise _fail(path, "`names` is empty; list at least one class")
    if nc is not None and nc != len(names):
        raise _fail(path, f"`nc` is {nc!r} but `names` has {len(names)}; fix or drop `nc`")
    return names


def _parse_pose(
    data: Mapping[str, object], path: Path
) -> tuple[tuple[int, int] | None, tuple[int, ...] | None]:
    raw_shape, raw_flip = data.get("kpt_shape"), data.get("flip_idx")
    if raw_shape is None:
        if raw_flip is not None:
            raise _fail(path, "`flip_idx` is given without `kpt_shape`; add `kpt_shape: [K, 3]`")
        return None, None
    if (
        not isinstance(raw_shape, list)
        or len(raw_shape) != 2
        or not all(isinstance(v, int) for v in raw_shape)
        or raw_shape[0] < 1
        or raw_shape[1] not in (2, 3)
    ):
        raise _fail(path, f"`kpt_shape` must be [K, 2] or [K, 3] with K >= 1, got {raw_shape!r}")
    kpt_shape = (int(raw_shape[0]), int(raw_shape[1]))
    if raw_flip is None:
        return kpt_shape, None
    if not isinstance(raw_flip, list) or sorted(raw_flip) != list(range(kpt_shape[0])):
        raise _fail(
            path, f"`flip_idx` must be a permutation of 0..{kpt_shape[0] - 1}, got {raw_flip!r}"
        )
    return kpt_shape, tuple(int(i) for i in raw_flip)


def _resolve_split(raw: object, root: Path, key: str, path: Path) -> tuple[Path, ...]:
    entries = raw if isinstance(raw, list) else [raw]
    sources: list[Path] = []
    for entry in entries:
        if not isinstance(entry, str) or not entry:
            raise _fail(path, f"`{key}` must be a path or a list of paths, got {raw!r}")
        source = Path(entry).expanduser()
        source = source if source.is_absolute() else root / source
        if not source.exists():
            raise _fail(
                path,
                f"`{key}` path {entry!r} does not exist (resolved to {str(source)!r}); fix `{key}` "
                "or `path` (relative paths start at the YAML's folder)",
            )
        sources.append(source)
    return tuple(sources)


def _resolve_task(
    task: Task | None, data: Mapping[str, object], kpt_shape: object, path: Path
) -> Task:
    raw = task if task is not None else data.get("task")
    if raw is None:
        return "pose" if kpt_shape is not None else "detect"
    if raw not in TASKS:
        raise _fail(path, f"task {raw!r} is unknown; use one of {TASKS!r}")
    resolved: Task = raw
    if resolved == "pose" and kpt_shape is None:
        raise _fail(path, "task 'pose' needs `kpt_shape: [K, 3]` (and `flip_idx`) in the YAML")
    return resolved


def load_dataset_yaml(path: str | Path, *, task: Task | None = None) -> DatasetSpec:
    """Read and check an Ultralytics dataset YAML.

    Args:
        path: the YAML file.
        task: the task the labels are read for; ``None`` uses the YAML's ``task`` key or infers it
            (module docstring).

    Returns:
        The resolved spec; every split source exists.

    Raises:
        DatasetConfigError: the file is missing or not a mapping, ``names`` is missing or
            malformed, a required split is missing, a split path does not exist, or the pose keys
            are inconsistent; the message names the YAML file, the key and the fix.
    """
    yaml_path = Path(path).expanduser().resolve()
    try:
        data = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
    except OSError as error:
        raise _fail(yaml_path, f"cannot read the dataset YAML ({error})") from None
    except yaml.YAMLError as error:
        raise _syntax_error(yaml_path, error) from None
    if not isinstance(data, dict):
        raise _fail(yaml_path, f"must be a mapping of keys (path, train, val, names), got {data!r}")
    names = _parse_names(data.get("names"), data.get("nc"), yaml_path)
    kpt_shape, flip_idx = _parse_pose(data, yaml_path)
    resolved_task = _resolve_task(task, data, kpt_shape, yaml_path)
    raw_root = data.get("path")
    root = Path(str(raw_root)).expanduser() if raw_root else yaml_path.parent
    root = root if root.is_absolute() else (yaml_path.parent / root).resolve()
    splits: dict[str, tuple[Path, ...]] = {}
    for key in SPLITS:
        raw = data.get(key)
        if raw is None:
            if key != "test":
                raise _fail(yaml_path, f"no `{key}` split; add `{key}: images/{key}`")
            continue
        splits[key] = _resolve_split(raw, root, key, yaml_path)
    return DatasetSpec(
        yaml_path=yaml_path,
        root=root,
        splits=splits,
        names=names,
        task=resolved_task,
        kpt_shape=kpt_shape,
        flip_idx=flip_idx,
    )


__all__ = ["SPLITS", "TASKS", "DatasetSpec", "Task", "load_dataset_yaml"]
