"""Ultralytics splits: list the images, find each label file, read it into :class:`ImageLabels`.

The label of an image is found by the Ultralytics path rule: replace the last ``images`` folder of
the image path with ``labels`` and the extension with ``.txt``
(``root/images/train/a.jpg`` → ``root/labels/train/a.txt``). An image path without an ``images``
folder has its label next to it (``a.jpg`` → ``a.txt``). A missing or empty label file is a
background image, which is valid and kept.

Under ``policy="skip"`` an image whose file or any label row is bad is dropped as a whole, never
only the bad row: keeping the rest would teach the network that the unlabelled object is
background. Each dropped file warns once, and a summary warning gives the totals.
"""

from __future__ import annotations

from pathlib import Path

from lucid_yolo.train.data.dataset_yaml import DatasetSpec, Task
from lucid_yolo.train.data.errors import (
    BadInputPolicy,
    DatasetConfigError,
    ImageReadError,
    Problem,
    ProblemSink,
)
from lucid_yolo.train.data.formats.geometry import LabelRows
from lucid_yolo.train.data.formats.ultralytics_rows import RowError, format_rows, parse_row
from lucid_yolo.train.data.image_probe import IMAGE_SUFFIXES, probe_image
from lucid_yolo.train.data.labels import ImageLabels


def label_path_for(image_path: Path) -> Path:
    """The label file of an image by the images → labels rule (module docstring).

    Args:
        image_path: the image file.

    Returns:
        The ``.txt`` path (it may not exist: then the image is background).
    """
    parts = list(image_path.parts)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            return Path(*parts).with_suffix(".txt")
    return image_path.with_suffix(".txt")


def _list_file(source: Path, sink: ProblemSink) -> list[Path]:
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise DatasetConfigError(f"{source}: cannot read the image list ({error})") from None
    images: list[Path] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        image = Path(line).expanduser()
        image = image if image.is_absolute() else (source.parent / image).resolve()
        if not image.is_file():
            sink.report(
                Problem(
                    source,
                    number,
                    f"image {line!r} does not exist (resolved to {str(image)!r}); fix the list "
                    "(relative paths start at the list file's folder)",
                    kind="image",
                )
            )
            sink.skip_image()
            continue
        images.append(image)
    return images


def list_split_images(sources: tuple[Path, ...], sink: ProblemSink) -> list[Path]:
    """Every image of a split, in a stable order.

    Args:
        sources: image folders (searched recursively for :data:`IMAGE_SUFFIXES`) or image-list
            ``.txt`` files (one path a line, relative to the list's folder; ``#`` comments).
        sink: receives a problem for each listed image that does not exist.

    Returns:
        Absolute image paths: folders sorted by path, lists in their own order.

    Raises:
        DatasetConfigError: a source is neither a folder nor a ``.txt`` list.
    """
    images: list[Path] = []
    for source in sources:
        if source.is_dir():
            images += sorted(
                p for p in source.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()
            )
        elif source.suffix == ".txt":
            images += _list_file(source, sink)
        else:
            raise DatasetConfigError(
                f"{source}: a split must be an image folder or a .txt list of images"
            )
    return images


def read_label_file(
    label_path: Path,
    image_path: Path,
    sink: ProblemSink,
    *,
    task: Task,
    num_classes: int,
    kpt_shape: tuple[int, int] | None = None,
) -> ImageLabels | None:
    """Read one image's label file.

    Args:
        label_path: the ``.txt`` file; missing means background.
        image_path: the image it labels.
        sink: receives one problem per bad row (each with its line number).
        task: row layout (see :mod:`.ultralytics_rows`).
        num_classes: valid class ids are ``[0, num_classes)``.
        kpt_shape: pose only: ``(K, D)``.

    Returns:
        The labels, or ``None`` when a row was bad (and the sink did not raise).
    """
    rows = LabelRows()
    num_keypoints = kpt_shape[0] if kpt_shape is not None else 0
    if not label_path.exists():
        return rows.build(image_path, task, num_keypoints, str(label_path))
    try:
        text = label_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        sink.report(Problem(label_path, None, f"cannot read it as UTF-8 text ({error}); fix it"))
        return None
    bad = False
    for number, line in enumerate(text.splitlines(), start=1):
        tokens = line.split()
        if not tokens:
            continue
        try:
            parse_row(tokens, rows, task=task, num_classes=num_classes, kpt_shape=kpt_shape)
        except RowError as error:
            sink.report(Problem(label_path, number, str(error)))
            bad = True
    return None if bad else rows.build(image_path, task, num_keypoints, str(label_path))


def scan_split(
    spec: DatasetSpec, split: str, sink: ProblemSink, *, check_images: bool = True
) -> list[ImageLabels]:
    """Read a split, reporting every problem to ``sink`` (which applies the policy).

    Args:
        spec: the dataset.
        split: ``"train"``, ``"val"`` or ``"test"``.
        sink: the policy (fail / skip / collect).
        check_images: probe each image's header (:func:`probe_image`); off trusts the files.

    Returns:
        Labels of every image without problems, in split order.

    Raises:
        DatasetConfigError: ``split`` is not in the spec.
    """
    if split not in spec.splits:
        raise DatasetConfigError(
            f"{spec.yaml_path}: no split {split!r}; the YAML defines {sorted(spec.splits)!r}"
        )
    result: list[ImageLabels] = []
    for image_path in list_split_images(spec.splits[split], sink):
        image_ok = True
        if check_images:
            try:
                probe_image(image_path)
            except ImageReadError as error:
                message = str(error).removeprefix(f"{image_path}: ")
                sink.report(Problem(image_path, None, message, kind="image"))
                image_ok = False
        labels = read_label_file(
            label_path_for(image_path),
            image_path,
            sink,
            task=spec.task,
            num_classes=spec.num_classes,
            kpt_shape=spec.kpt_shape,
        )
        if labels is None or not image_ok:
            sink.skip_image()
            continue
        result.append(labels)
    return result


def load_split(
    spec: DatasetSpec, split: str, *, policy: BadInputPolicy = "fail", check_images: bool = True
) -> list[ImageLabels]:
    """Read one split of an Ultralytics dataset.

    Args:
        spec: from :func:`~lucid_yolo.train.data.dataset_yaml.load_dataset_yaml`.
        split: ``"train"``, ``"val"`` or ``"test"``.
        policy: ``"fail"`` raises at the first bad input; ``"skip"`` drops the image, warns once
            per file (:class:`~lucid_yolo.train.data.errors.DataWarning`) and once with totals.
        check_images: probe each image's header; off trusts the files (faster on huge sets).

    Returns:
        One :class:`ImageLabels` per kept image, in split order; background images included.

    Raises:
        LabelFormatError: (``fail``) a bad row; the message is ``file:line: what, fix``.
        ImageReadError: (``fail``) a missing, empty or corrupt image.
        DatasetConfigError: ``split`` is not in the spec.

    Example:
        >>> spec = load_dataset_yaml("data.yaml", task="segment")  # doctest: +SKIP
        >>> train = load_split(spec, "train", policy="skip")  # doctest: +SKIP
    """
    sink = ProblemSink(policy=policy)
    labels = scan_split(spec, split, sink, check_images=check_images)
    sink.summarise(f"split {split!r} of {spec.yaml_path}")
    return labels


def write_label_file(
    label_path: Path, labels: ImageLabels, task: Task, *, kpt_dims: int = 3
) -> None:
    """Write one image's labels as Ultralytics rows (an empty file for a background image).

    Args:
        label_path: the ``.txt`` to write; parent folders are created.
        labels: the image's labels, carrying the task's field.
        task: the row layout.
        kpt_dims: pose only: 2 or 3 values per keypoint.
    """
    label_path.parent.mkdir(parents=True, exist_ok=True)
    rows = format_rows(labels, task, kpt_dims)
    label_path.write_text("".join(f"{row}\n" for row in rows), encoding="utf-8")


__all__ = [
    "label_path_for",
    "list_split_images",
    "load_split",
    "read_label_file",
    "scan_split",
    "write_label_file",
]
