"""DOTA oriented-box labels (``labelTxt``) read into :class:`ImageLabels` for the OBB task.

A DOTA label file sits in ``labelTxt/`` with the image's stem; its rows are
``x1 y1 x2 y2 x3 y3 x4 y4 classname difficult`` in pixels, the four corners in annotation order,
``difficult`` 0 or 1 (a row without it counts as 0). Header lines ``imagesource:...`` and
``gsd:...`` (DOTA v1.0) are skipped. Corners are normalised by the image size read from the
image's header; ``difficult`` is kept in :attr:`ImageLabels.difficult` for metrics to ignore.
Class names map to ids through ``names`` (:data:`DOTA_V1_NAMES` by default); ``names=None``
collects every name found, sorted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lucid_yolo.train.data.errors import (
    BadInputPolicy,
    ImageReadError,
    Problem,
    ProblemSink,
    path_text,
)
from lucid_yolo.train.data.formats.geometry import LabelRows, hull_box, out_of_range_index
from lucid_yolo.train.data.image_probe import IMAGE_SUFFIXES, probe_image
from lucid_yolo.train.data.labels import ImageLabels
from lucid_yolo.train.data.progress import Progress

DOTA_V1_NAMES: tuple[str, ...] = (
    "plane",
    "ship",
    "storage-tank",
    "baseball-diamond",
    "tennis-court",
    "basketball-court",
    "ground-track-field",
    "harbor",
    "bridge",
    "large-vehicle",
    "small-vehicle",
    "helicopter",
    "roundabout",
    "soccer-ball-field",
    "swimming-pool",
)
"""The 15 DOTA v1.0 categories, in the order of the dataset's paper and devkit."""

_HEADERS = ("imagesource:", "gsd:")


@dataclass(frozen=True)
class DotaDataset:
    """DOTA labels of one folder of images.

    Attributes:
        labels: one entry per image (background included), sorted by image path.
        names: class names, index = class id.
    """

    labels: list[ImageLabels]
    names: tuple[str, ...]


def _rows(path: Path) -> list[tuple[int, list[str]]] | str:
    """The tokenised rows with their line numbers, or why the file cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        return f"cannot read it as UTF-8 text ({error}); fix it"
    out: list[tuple[int, list[str]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        tokens = line.split()
        if tokens and not tokens[0].lower().startswith(_HEADERS):
            out.append((number, tokens))
    return out


def _parse(
    tokens: list[str], rows: LabelRows, size: tuple[int, int], names: dict[str, int]
) -> str | None:
    if len(tokens) not in (9, 10):
        return f"{len(tokens)} columns; expected `x1 y1 x2 y2 x3 y3 x4 y4 classname difficult`"
    try:
        values = np.array([float(t) for t in tokens[:8]], dtype=np.float64)
    except ValueError:
        return f"corner values {tokens[:8]!r} are not all numbers"
    name = tokens[8]
    if name not in names:
        return f"class name {name!r} is not in names {sorted(names)!r}; add it or fix the row"
    difficult = tokens[9] if len(tokens) == 10 else "0"
    if difficult not in ("0", "1"):
        return f"difficult flag {difficult!r} must be 0 or 1"
    height, width = size
    corners = (values.reshape(4, 2) / np.array([width, height])).astype(np.float32)
    index = out_of_range_index(corners)
    if index is not None:
        return (
            f"corner coordinate {float(values[index])!r} px is not finite or outside the "
            f"{width}x{height} image; fix the row or the image"
        )
    box = hull_box(corners)
    if not (box[2] > box[0] and box[3] > box[1]):
        return f"corners {tokens[:8]!r} enclose no area; fix or remove the row"
    rows.classes.append(names[name])
    rows.boxes.append(box)
    rows.corners.append(corners)
    rows.difficult.append(difficult == "1")
    return None


def read_dota(
    images_dir: str | Path,
    labels_dir: str | Path,
    *,
    names: tuple[str, ...] | None = DOTA_V1_NAMES,
    policy: BadInputPolicy = "fail",
    sink: ProblemSink | None = None,
) -> DotaDataset:
    """Read DOTA labels for every image of a folder.

    Args:
        images_dir: the images (searched recursively for :data:`IMAGE_SUFFIXES`).
        labels_dir: the ``labelTxt`` folder; ``<stem>.txt`` per image, missing = background.
        names: class names (id = index); ``None`` collects the names found, sorted.
        policy: ``fail`` raises at the first bad input; ``skip`` drops the image and warns.
        sink: collect problems here instead (``check_dataset``); overrides ``policy``.

    Returns:
        OBB labels (``corners``, ``difficult``) and the names.

    Raises:
        LabelFormatError: (``fail``) a bad row, as ``file:line: what, fix``.
        ImageReadError: (``fail``) a missing or corrupt image.
    """
    images = sorted(p for p in Path(images_dir).rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    label_dir = Path(labels_dir)
    parsed = {
        image: _rows(label_dir / f"{image.stem}.txt")
        for image in images
        if (label_dir / f"{image.stem}.txt").is_file()
    }
    if names is None:
        found = {
            t[8]
            for rows in parsed.values()
            if not isinstance(rows, str)
            for _, t in rows
            if len(t) in (9, 10)
        }
        names = tuple(sorted(found))
    index = {name: i for i, name in enumerate(names)}
    own_sink = sink is None
    sink = ProblemSink(policy=policy) if sink is None else sink
    labels: list[ImageLabels] = []
    progress = Progress(f"data: {path_text(label_dir)}: reading image headers", len(images))
    for image in progress.track(images):
        label_path = label_dir / f"{image.stem}.txt"
        try:
            size = probe_image(image)
        except ImageReadError as error:
            sink.report(
                Problem(image, None, str(error).removeprefix(f"{path_text(image)}: "), "image")
            )
            sink.skip_image()
            continue
        rows, ok, found_rows = LabelRows(), True, parsed.get(image, [])
        if isinstance(found_rows, str):
            sink.report(Problem(label_path, None, found_rows))
            sink.skip_image()
            continue
        for number, tokens in found_rows:
            problem = _parse(tokens, rows, size, index)
            if problem is not None:
                sink.report(Problem(label_path, number, problem))
                ok = False
        if not ok:
            sink.skip_image()
            continue
        labels.append(rows.build(image, "obb", 0, str(label_path)))
    if own_sink:
        sink.summarise(f"DOTA labels in {label_dir}")
    return DotaDataset(labels, names)


__all__ = ["DOTA_V1_NAMES", "DotaDataset", "read_dota"]
