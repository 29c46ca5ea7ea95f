"""Ultralytics splits: list the images, find each label file, read it into :class:`ImageLabels`.

The label of an image is found by the Ultralytics path rule: replace the last ``images`` folder of
the image path with ``labels`` and the extension with ``.txt``
(``root/images/train/a.jpg`` → ``root/labels/train/a.txt``). An image path without an ``images``
folder has its label next to it (``a.jpg`` → ``a.txt``). A missing or empty label file is a
background image, which is valid and kept.

A split must hold images, and at least one of them a label file: a split in which no image has
one is a missing or misplaced ``labels/`` folder far more often than a set of pure background, so
it is an error unless ``allow_unlabelled`` says the background is meant (issue 15). Rows read in a
way the user may not expect (:func:`row_note`), rows repeated in one file and images smaller than
:data:`MIN_IMAGE_SIDE` that carry instances are warnings: the data is kept as read.

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
    path_text,
)
from lucid_yolo.train.data.formats.geometry import LabelRows
from lucid_yolo.train.data.formats.ultralytics_rows import (
    RowError,
    format_rows,
    parse_row,
    row_note,
)
from lucid_yolo.train.data.image_probe import IMAGE_SUFFIXES, probe_image
from lucid_yolo.train.data.labels import ImageLabels
from lucid_yolo.train.data.progress import Progress

MIN_IMAGE_SIDE = 8
"""Pixels: an image with instances and a side below this is warned about as degenerate.

The finest detection stride of YOLO26 is 8, so every box of such an image spans less than one
cell of the finest grid in that direction, whatever ``imgsz`` stretches it to; a 1x1 px image
with boxes is a broken export, not data.
"""


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
    first_line: dict[tuple[float, ...], int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        tokens = line.split()
        if not tokens:
            continue
        try:
            parse_row(tokens, rows, task=task, num_classes=num_classes, kpt_shape=kpt_shape)
        except RowError as error:
            sink.report(Problem(label_path, number, str(error)))
            bad = True
            continue
        note = row_note(tokens, task)
        if note is not None:
            sink.report(Problem(label_path, number, note, severity="warning"))
        key = tuple(float(t) for t in tokens)
        if key in first_line:
            sink.report(
                Problem(
                    label_path,
                    number,
                    f"repeats line {first_line[key]} exactly; the instance counts twice in the "
                    "loss and the metrics: remove one of the rows",
                    severity="warning",
                )
            )
        first_line.setdefault(key, number)
    return None if bad else rows.build(image_path, task, num_keypoints, str(label_path))


def _split_problem(spec: DatasetSpec, split: str, message: str) -> Problem:
    """A problem of a whole split, located at the YAML that names it."""
    where = spec.yaml_path if spec.yaml_path is not None else spec.root
    sources = ", ".join(repr(path_text(s)) for s in spec.splits[split])
    return Problem(where, None, f"split {split!r} ({sources}) {message}", kind="config")


def _check_split(
    spec: DatasetSpec, split: str, images: list[Path], *, allow_unlabelled: bool
) -> Problem | None:
    """The problem of a split with no image, or with no label file for any image."""
    if not images:
        return _split_problem(
            spec,
            split,
            f"holds no image ({', '.join(sorted(IMAGE_SUFFIXES))}); add images or fix the path",
        )
    if allow_unlabelled or any(label_path_for(image).exists() for image in images):
        return None
    expected = label_path_for(images[0])
    return _split_problem(
        spec,
        split,
        f"has no label file for any of its {len(images)} image(s) (the first would be "
        f"{path_text(expected)!r}); put the labels/ folder beside images/, or pass "
        "allow_unlabelled=True (`--data.allow_unlabelled true`) to train on background only",
    )


def scan_split(
    spec: DatasetSpec,
    split: str,
    sink: ProblemSink,
    *,
    check_images: bool = True,
    allow_unlabelled: bool = False,
) -> list[ImageLabels]:
    """Read a split, reporting every problem to ``sink`` (which applies the policy).

    Args:
        spec: the dataset.
        split: ``"train"``, ``"val"`` or ``"test"``.
        sink: the policy (fail / skip / collect).
        check_images: probe each image's header (:func:`probe_image`); off trusts the files.
        allow_unlabelled: accept a split in which no image has a label file (all background).

    Returns:
        Labels of every image without problems, in split order.

    Raises:
        DatasetConfigError: ``split`` is not in the spec.

    Notes:
        A scan that takes more than a few seconds prints progress lines with the time left
        (:class:`~lucid_yolo.train.data.progress.Progress`).
    """
    if split not in spec.splits:
        raise DatasetConfigError(
            f"{spec.yaml_path}: no split {split!r}; the YAML defines {sorted(spec.splits)!r}"
        )
    images = list_split_images(spec.splits[split], sink)
    split_problem = _check_split(spec, split, images, allow_unlabelled=allow_unlabelled)
    if split_problem is not None:
        sink.report(split_problem)
    reading = "labels and image headers" if check_images else "labels"
    progress = Progress(f"data: {split}: reading {reading}", len(images))
    result: list[ImageLabels] = []
    for image_path in progress.track(images):
        image_ok = True
        size = None
        if check_images:
            try:
                size = probe_image(image_path)
            except ImageReadError as error:
                message = str(error).removeprefix(f"{path_text(image_path)}: ")
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
        if size is not None and min(size) < MIN_IMAGE_SIDE and len(labels):
            sink.report(
                Problem(
                    image_path,
                    None,
                    f"is {size[1]}x{size[0]} px but has {len(labels)} instance(s), each under "
                    f"one {MIN_IMAGE_SIDE} px grid cell; replace the image or drop its labels",
                    kind="image",
                    severity="warning",
                )
            )
        result.append(labels)
    return result


def load_split(
    spec: DatasetSpec,
    split: str,
    *,
    policy: BadInputPolicy = "fail",
    check_images: bool = True,
    allow_unlabelled: bool = False,
) -> list[ImageLabels]:
    """Read one split of an Ultralytics dataset.

    Args:
        spec: from :func:`~lucid_yolo.train.data.dataset_yaml.load_dataset_yaml`.
        split: ``"train"``, ``"val"`` or ``"test"``.
        policy: ``"fail"`` raises at the first bad input; ``"skip"`` drops the image, warns once
            per file (:class:`~lucid_yolo.train.data.errors.DataWarning`) and once with totals.
        check_images: probe each image's header; off trusts the files (faster on huge sets).
        allow_unlabelled: accept a split in which no image has a label file (all background).

    Returns:
        One :class:`ImageLabels` per kept image, in split order; background images included.

    Raises:
        LabelFormatError: (``fail``) a bad row; the message is ``file:line: what, fix``.
        ImageReadError: (``fail``) a missing, empty or corrupt image.
        DatasetConfigError: ``split`` is not in the spec, holds no image, has no label file
            (unless ``allow_unlabelled``), or (``skip``) every image was skipped.

    Example:
        >>> spec = load_dataset_yaml("data.yaml", task="segment")  # doctest: +SKIP
        >>> train = load_split(spec, "train", policy="skip")  # doctest: +SKIP
    """
    sink = ProblemSink(policy=policy)
    labels = scan_split(
        spec, split, sink, check_images=check_images, allow_unlabelled=allow_unlabelled
    )
    sink.summarise(f"split {split!r} of {path_text(spec.yaml_path or spec.root)}")
    if not labels:
        raise DatasetConfigError(
            f"{path_text(spec.yaml_path or spec.root)}: every image of split {split!r} was "
            "skipped for its problems; run `lucid-yolo data check` to list them"
        )
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
    "MIN_IMAGE_SIDE",
    "label_path_for",
    "list_split_images",
    "load_split",
    "read_label_file",
    "scan_split",
    "write_label_file",
]
