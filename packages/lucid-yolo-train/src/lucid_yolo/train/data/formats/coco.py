"""COCO json (instances or person_keypoints) read into :class:`ImageLabels`.

What is read, per annotation:

- ``bbox`` ``[x, y, w, h]`` pixels → ``xyxy`` normalised by the image's ``width``/``height``.
- ``category_id`` → a contiguous class id: categories sorted by id get ``0..C-1``;
  :attr:`CocoDataset.category_ids` maps back and :attr:`CocoDataset.names` holds their names.
- ``segmentation`` (segment task): a list of polygons ``[[x1, y1, ...], ...]`` in pixels, or an
  RLE ``{"size": [h, w], "counts": list | str}`` (uncompressed or compact counts). Training
  uses one polygon per instance, so the parts of a multi-part polygon, and every contour of a
  decoded RLE mask, holes' included (:func:`~.mask_polygons.mask_to_polygons`), are joined into
  one polygon by zero-width bridges (:func:`~.geometry.merge_polygon_parts`), which the even-odd
  fill of the training targets turns back into the mask with its holes. An RLE is also kept as it
  is (:attr:`ImageLabels.rle_masks`), and the mask metric scores against it exactly.
  The box still comes from ``bbox``.
- ``keypoints`` (pose task) ``[x1, y1, v1, ...]`` pixels; ``kpt_shape`` is ``[K, 3]`` from the
  categories' ``keypoints`` names, and ``flip_idx`` pairs each ``left*`` name with its ``right*``
  twin (a name without a twin maps to itself).
- ``iscrowd: 1``: a crowd region, not an instance. ``crowd="drop"`` (default) leaves it out and
  counts it in :attr:`CocoDataset.crowd_dropped`; ``crowd="ignore"`` keeps it with
  ``difficult=True``, the flag metrics treat as "ignore this region" (as COCO evaluation does:
  intersection over the prediction's area). Crowds are never training targets in COCO's own
  protocol, and :class:`~lucid_yolo.train.data.YoloDataset` leaves them out of training
  samples: ``ignore`` changes the metric, not what is trained.

Images listed without annotations are background images. An annotation's problem is reported
as ``file.json: annotation id N (image 'name'): what, fix`` (json has no useful line numbers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from lucid_yolo.train.data.dataset_yaml import Task
from lucid_yolo.train.data.errors import (
    BadInputPolicy,
    DatasetConfigError,
    ImageReadError,
    Problem,
    ProblemSink,
    path_text,
)
from lucid_yolo.train.data.formats.coco_annotation import CocoAnnotationError, parse_annotation
from lucid_yolo.train.data.formats.geometry import LabelRows
from lucid_yolo.train.data.image_probe import probe_image
from lucid_yolo.train.data.labels import ImageLabels
from lucid_yolo.train.data.progress import Progress
from lucid_yolo.train.exceptions import TrainConfigError

CrowdPolicy = Literal["drop", "ignore"]


@dataclass(frozen=True)
class CocoDataset:
    """A COCO json read for one task.

    Attributes:
        labels: one entry per image of ``images`` (background included), in json order.
        names: class names, index = contiguous class id.
        category_ids: the COCO ``category_id`` of each contiguous class id.
        kpt_shape: pose only: ``(K, 3)``.
        flip_idx: pose only: left-right flip permutation from the keypoint names.
        keypoint_names: pose only: the categories' keypoint names.
        crowd_dropped: crowd annotations left out under ``crowd="drop"``.
    """

    labels: list[ImageLabels]
    names: tuple[str, ...]
    category_ids: tuple[int, ...]
    kpt_shape: tuple[int, int] | None = None
    flip_idx: tuple[int, ...] | None = None
    keypoint_names: tuple[str, ...] | None = None
    crowd_dropped: int = 0


def flip_idx_from_names(names: tuple[str, ...]) -> tuple[int, ...]:
    """Left-right flip permutation: ``left_x`` ↔ ``right_x`` (any case), others fixed.

    Args:
        names: keypoint names, e.g. COCO's ``("nose", "left_eye", "right_eye", ...)``.

    Returns:
        ``flip_idx`` with ``flip_idx[i]`` the index that keypoint ``i`` becomes when flipped.
    """
    index = {n.lower(): i for i, n in enumerate(names)}
    flip: list[int] = []
    for i, name in enumerate(names):
        lower = name.lower()
        twin = lower.replace("left", "\0").replace("right", "left").replace("\0", "right")
        flip.append(index.get(twin, i))
    return tuple(flip)


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise DatasetConfigError(f"{path}: cannot read the COCO json ({error})") from None
    except json.JSONDecodeError as error:
        raise DatasetConfigError(f"{path}: is not valid json ({error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise DatasetConfigError(f"{path}: a COCO json needs an `images` list (and `categories`)")
    if not isinstance(data.get("annotations", []), list):
        raise DatasetConfigError(f"{path}: `annotations` must be a list")
    return data


def _entry(path: Path, key: str, index: int, entry: object, fields: dict[str, type]) -> None:
    if not isinstance(entry, dict) or any(
        not isinstance(entry.get(name), kind) for name, kind in fields.items()
    ):
        expected = ", ".join(f"{name}: {kind.__name__}" for name, kind in fields.items())
        raise DatasetConfigError(f"{path}: {key}[{index}] is {entry!r}; it needs {expected}")


def _categories(path: Path, data: dict[str, Any], task: Task) -> CocoDataset:
    raw = data.get("categories")
    if not isinstance(raw, list) or not raw:
        raise DatasetConfigError(f"{path}: no `categories`; add [{{'id': 1, 'name': ...}}, ...]")
    for index, entry in enumerate(raw):
        _entry(path, "categories", index, entry, {"id": int, "name": str})
    cats = sorted(raw, key=lambda c: int(c["id"]))
    names = tuple(str(c["name"]) for c in cats)
    ids = tuple(int(c["id"]) for c in cats)
    if len(set(ids)) != len(ids):
        raise DatasetConfigError(f"{path}: category ids {list(ids)!r} repeat; make them unique")
    if task != "pose":
        return CocoDataset([], names, ids)
    kpt_names = {tuple(str(n) for n in c["keypoints"]) for c in cats if c.get("keypoints")}
    if len(kpt_names) != 1:
        raise DatasetConfigError(
            f"{path}: task 'pose' needs one keypoint list shared by the categories, found "
            f"{len(kpt_names)}; give each category the same `keypoints` names"
        )
    (keypoint_names,) = kpt_names
    k = len(keypoint_names)
    return CocoDataset([], names, ids, (k, 3), flip_idx_from_names(keypoint_names), keypoint_names)


@dataclass
class _Image:
    path: Path
    height: int
    width: int
    rows: LabelRows = field(default_factory=LabelRows)
    bad: bool = False


def _read_images(
    path: Path, data: dict[str, Any], images_dir: Path, sink: ProblemSink, check_images: bool
) -> dict[int, _Image]:
    images: dict[int, _Image] = {}
    reading = "image headers" if check_images else "image entries"
    progress = Progress(f"data: {path.name}: reading {reading}", len(data["images"]))
    for index, entry in enumerate(progress.track(data["images"])):
        _entry(
            path, "images", index, entry, {"id": int, "file_name": str, "width": int, "height": int}
        )
        image = _Image(images_dir / entry["file_name"], entry["height"], entry["width"])
        images[entry["id"]] = image
        if not check_images:
            continue
        try:
            size = probe_image(image.path)
        except ImageReadError as error:
            message = str(error).removeprefix(f"{path_text(image.path)}: ")
            sink.report(Problem(image.path, None, message, kind="image"))
            image.bad = True
            continue
        if size != (image.height, image.width):
            message = (
                f"the image is {size[1]}x{size[0]} but {path.name} says "
                f"{image.width}x{image.height}; fix the json's width/height"
            )
            sink.report(Problem(image.path, None, message, kind="image"))
            image.bad = True
    return images


def _read_annotations(
    path: Path,
    data: dict[str, Any],
    images: dict[int, _Image],
    meta: CocoDataset,
    sink: ProblemSink,
    *,
    task: Task,
    crowd: CrowdPolicy,
) -> int:
    """Parse every annotation into its image's rows; returns the number of crowds dropped."""
    contiguous = {cat_id: i for i, cat_id in enumerate(meta.category_ids)}
    num_keypoints = meta.kpt_shape[0] if meta.kpt_shape else 0
    crowd_dropped = 0
    for ann in data.get("annotations", []):
        if not isinstance(ann, dict):
            sink.report(Problem(path, None, f"annotation {ann!r} is not an object"))
            continue
        image_id = ann.get("image_id")
        where = f"annotation id {ann.get('id')!r}"
        if not isinstance(image_id, int) or image_id not in images:
            sink.report(Problem(path, None, f"{where}: image_id {image_id!r} is not in `images`"))
            continue
        image = images[image_id]
        is_crowd = bool(ann.get("iscrowd", 0))
        if is_crowd and crowd == "drop":
            crowd_dropped += 1
            continue
        try:
            parse_annotation(
                ann,
                image.rows,
                task=task,
                height=image.height,
                width=image.width,
                contiguous=contiguous,
                num_keypoints=num_keypoints,
                difficult=is_crowd,
            )
        except CocoAnnotationError as error:
            sink.report(Problem(path, None, f"{where} (image {image.path.name!r}): {error}"))
            image.bad = True
    return crowd_dropped


def read_coco(
    json_path: str | Path,
    images_dir: str | Path,
    *,
    task: Task = "detect",
    policy: BadInputPolicy = "fail",
    crowd: CrowdPolicy = "drop",
    check_images: bool = True,
    sink: ProblemSink | None = None,
) -> CocoDataset:
    """Read a COCO json for one task.

    Args:
        json_path: the annotation file.
        images_dir: folder that ``file_name`` of each image is relative to.
        task: ``detect``, ``segment`` or ``pose`` (COCO has no oriented boxes: use DOTA).
        policy: ``fail`` raises at the first bad input; ``skip`` drops the image, warns once per
            file and once with totals.
        crowd: what ``iscrowd: 1`` annotations become (module docstring).
        check_images: probe each image and compare its size with the json's ``width``/``height``.
        sink: collect problems here instead (``check_dataset``); overrides ``policy``.

    Returns:
        The labels and the class metadata.

    Raises:
        DatasetConfigError: unreadable json, malformed ``images``/``categories`` entries, task
            ``obb``, or pose categories without one shared keypoint list.
        LabelFormatError: (``fail``) a bad annotation, naming the json and the annotation id.
        ImageReadError: (``fail``) a missing or corrupt image, or a size that differs from the
            json's.
    """
    path = Path(json_path).expanduser().resolve()
    if task == "obb":
        raise DatasetConfigError(
            f"{path}: COCO json has no oriented boxes; read OBB data from DOTA or Ultralytics txt"
        )
    if crowd not in ("drop", "ignore"):
        raise TrainConfigError(f"crowd must be 'drop' or 'ignore', got {crowd!r}")
    data = _load_json(path)
    meta = _categories(path, data, task)
    own_sink = sink is None
    sink = ProblemSink(policy=policy) if sink is None else sink
    images_root = Path(images_dir).expanduser().resolve()
    images = _read_images(path, data, images_root, sink, check_images)
    crowd_dropped = _read_annotations(path, data, images, meta, sink, task=task, crowd=crowd)
    labels: list[ImageLabels] = []
    k = meta.kpt_shape[0] if meta.kpt_shape else 0
    for image_id, image in images.items():
        if image.bad:
            sink.skip_image()
            continue
        built = image.rows.build(image.path, task, k, f"{path}: image id {image_id}")
        if crowd == "ignore":
            flags = np.asarray(image.rows.difficult, dtype=np.bool_).reshape(len(built))
            built = replace(built, difficult=flags)
        labels.append(built)
    if own_sink:
        sink.summarise(str(path))
    return replace(meta, labels=labels, crowd_dropped=crowd_dropped)


__all__ = ["CocoDataset", "CrowdPolicy", "flip_idx_from_names", "read_coco"]
