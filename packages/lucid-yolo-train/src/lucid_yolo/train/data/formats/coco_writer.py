"""Write :class:`ImageLabels` as a COCO json (the inverse of :func:`~.coco.read_coco`).

Image sizes come from each image's header (:func:`~lucid_yolo.train.data.image_probe.probe_image`),
since :class:`ImageLabels` is normalised. An instance read from an RLE is written as that RLE
(compact counts, holes kept), any other segment instance as its polygon. ``area`` is the RLE's
pixel count or the polygon's area for the segment task (as COCO computes it from the mask) and
the box's otherwise. Every written annotation has
``iscrowd: 0`` except instances flagged ``difficult``, which become crowd regions with
``iscrowd: 1``, the reverse of ``read_coco(crowd="ignore")``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lucid_yolo.train.data.dataset_yaml import Task
from lucid_yolo.train.data.errors import DatasetConfigError
from lucid_yolo.train.data.image_probe import probe_image
from lucid_yolo.train.data.labels import FloatArray, ImageLabels
from lucid_yolo.train.exceptions import TrainConfigError


def _polygon_area(points: FloatArray) -> float:
    x, y = points[:, 0].astype(np.float64), points[:, 1].astype(np.float64)
    return float(abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2)


def _round(values: FloatArray) -> list[float]:
    return [round(float(v), 3) for v in values.reshape(-1)]


def coco_annotations(
    labels: ImageLabels,
    *,
    image_id: int,
    first_id: int,
    height: int,
    width: int,
    task: Task,
    category_ids: tuple[int, ...],
) -> list[dict[str, object]]:
    """The COCO annotations of one image.

    Args:
        labels: the image's labels, normalised.
        image_id: the image's COCO id.
        first_id: id of the first annotation; the rest follow consecutively.
        height: image height, pixels.
        width: image width, pixels.
        task: which geometry is written (``segmentation`` for segment, ``keypoints`` for pose).
        category_ids: COCO id of each contiguous class id.

    Returns:
        Annotation dicts with pixel ``bbox`` ``[x, y, w, h]`` rounded to 1/1000 px.

    Raises:
        TrainConfigError: ``task`` is ``obb`` (COCO has no oriented boxes).
        DatasetConfigError: ``labels`` lacks the task's field.
    """
    if task == "obb":
        raise TrainConfigError("COCO json has no oriented boxes; write OBB data as Ultralytics txt")
    size = np.array([width, height], dtype=np.float32)
    out: list[dict[str, object]] = []
    for i, cls in enumerate(labels.classes.tolist()):
        x1, y1, x2, y2 = (labels.boxes[i].reshape(2, 2) * size).reshape(4).tolist()
        ann: dict[str, object] = {
            "id": first_id + i,
            "image_id": image_id,
            "category_id": category_ids[cls],
            "bbox": _round(np.array([x1, y1, x2 - x1, y2 - y1], dtype=np.float32)),
            "area": (x2 - x1) * (y2 - y1),
            "iscrowd": int(labels.difficult is not None and bool(labels.difficult[i])),
        }
        if task == "segment":
            if labels.polygons is None:
                raise DatasetConfigError(f"{labels.source!r}: the segment task needs polygons")
            rle = None if labels.rle_masks is None else labels.rle_masks[i]
            if rle is None:
                polygon = labels.polygons[i] * size
                ann["segmentation"] = [_round(polygon)]
                ann["area"] = _polygon_area(polygon)
            else:
                ann["segmentation"] = rle.to_coco()
                ann["area"] = rle.area
        elif task == "pose":
            if labels.keypoints is None:
                raise DatasetConfigError(f"{labels.source!r}: the pose task needs keypoints")
            keypoints = labels.keypoints[i].copy()
            keypoints[:, :2] *= size
            ann["keypoints"] = [v if j % 3 < 2 else int(v) for j, v in enumerate(_round(keypoints))]
            ann["num_keypoints"] = int((keypoints[:, 2] > 0).sum())
        out.append(ann)
    return out


def write_coco(
    labels: list[ImageLabels],
    json_path: str | Path,
    *,
    names: tuple[str, ...],
    task: Task,
    images_root: str | Path,
    category_ids: tuple[int, ...] | None = None,
    keypoint_names: tuple[str, ...] | None = None,
) -> Path:
    """Write labels as a COCO json.

    Args:
        labels: one entry per image.
        json_path: the file to write (parent folders are created).
        names: class names, index = contiguous class id.
        task: ``detect``, ``segment`` or ``pose``.
        images_root: ``file_name`` is each image path relative to this folder.
        category_ids: COCO id per class; default ``1..C`` (COCO ids start at 1).
        keypoint_names: pose: names written in the categories (default ``kpt0..``); a
            ``left*``/``right*`` naming lets ``read_coco`` rebuild ``flip_idx``.

    Returns:
        ``json_path``.

    Raises:
        DatasetConfigError: an image lies outside ``images_root``, or see :func:`coco_annotations`.
        ImageReadError: an image cannot be probed for its size.
    """
    ids = category_ids if category_ids is not None else tuple(range(1, len(names) + 1))
    root = Path(images_root).expanduser().resolve()
    categories: list[dict[str, object]] = []
    for cat_id, name in zip(ids, names, strict=True):
        category: dict[str, object] = {"id": cat_id, "name": name, "supercategory": name}
        if task == "pose":
            k = next((x.keypoints.shape[1] for x in labels if x.keypoints is not None), 0)
            category["keypoints"] = list(keypoint_names or (f"kpt{j}" for j in range(k)))
            category["skeleton"] = []
        categories.append(category)
    images: list[dict[str, object]] = []
    annotations: list[dict[str, object]] = []
    for image_id, item in enumerate(labels, start=1):
        path = item.image_path.resolve()
        if not path.is_relative_to(root):
            raise DatasetConfigError(f"image {str(path)!r} is not under images_root {str(root)!r}")
        height, width = probe_image(path)
        images.append(
            {
                "id": image_id,
                "file_name": path.relative_to(root).as_posix(),
                "height": height,
                "width": width,
            }
        )
        annotations += coco_annotations(
            item,
            image_id=image_id,
            first_id=len(annotations) + 1,
            height=height,
            width=width,
            task=task,
            category_ids=ids,
        )
    out = Path(json_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {"images": images, "annotations": annotations, "categories": categories}
    out.write_text(json.dumps(document), encoding="utf-8")
    return out


__all__ = ["coco_annotations", "write_coco"]
