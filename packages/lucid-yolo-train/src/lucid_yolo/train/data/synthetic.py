"""Synthetic shapes dataset: the embedded default and the test fixture of every task.

Each image is a noisy, low-contrast textured grey background with 1..``max_objects`` coloured
shapes (:mod:`.synthetic_shapes`) at random sizes, positions and rotations. Shapes never overlap,
so every label is complete: no shape hides another's pixels or keypoints. The writer produces the
Ultralytics layout that :func:`~lucid_yolo.train.data.dataset_yaml.load_dataset_yaml` reads::

    root/data.yaml
    root/images/{train,val}/000000.jpg
    root/labels/{train,val}/000000.txt

Determinism: image ``i`` of split ``s`` is drawn from its own generator seeded with
``(seed, s, i)``, so the same seed gives byte-identical label files and images (for a given OpenCV
build), and growing ``num_train`` leaves the first images unchanged.

Example:
    >>> data_yaml = generate_synthetic("/tmp/shapes", task="detect", num_train=16)  # doctest: +SKIP
"""

from __future__ import annotations

import re
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
import yaml

from lucid_yolo.train.data.dataset_yaml import TASKS, Task
from lucid_yolo.train.data.formats.geometry import LabelRows, hull_box
from lucid_yolo.train.data.formats.ultralytics import write_label_file
from lucid_yolo.train.data.image_file import write_image
from lucid_yolo.train.data.labels import ImageLabels
from lucid_yolo.train.data.synthetic_shapes import (
    FLIP_IDX,
    NUM_KEYPOINTS,
    SHAPE_CLASSES,
    ShapeInstance,
)
from lucid_yolo.train.exceptions import TrainConfigError

UInt8Image = npt.NDArray[np.uint8]

_SPLIT_IDS = {"train": 0, "val": 1}
_SUBPIXEL_BITS = 4  # fillPoly fixed-point precision: 1/16 px
_PLACEMENT_ATTEMPTS = 60
_GENERATED = re.compile(r"\d{6}\.(jpg|png|txt)")  # names this module writes in split folders


def _background(rng: np.random.Generator, height: int, width: int) -> npt.NDArray[np.float32]:
    base = rng.uniform(70.0, 170.0) + rng.uniform(-12.0, 12.0, size=3)  # low saturation grey
    # Smooth blotches, mostly in brightness, plus 8 px grain: texture without saturated colour.
    coarse = base + rng.normal(0.0, 5.0, size=(6, 6, 3)) + rng.normal(0.0, 22.0, size=(6, 6, 1))
    size = (width, height)
    image = np.asarray(
        cv2.resize(coarse.astype(np.float32), size, interpolation=cv2.INTER_LINEAR), np.float32
    )
    fine = rng.normal(0.0, 10.0, size=(height // 8 + 1, width // 8 + 1)).astype(np.float32)
    image += np.asarray(cv2.resize(fine, size, interpolation=cv2.INTER_NEAREST))[..., None]
    for _ in range(int(rng.integers(0, 4))):  # grey distractor strokes
        p1 = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        p2 = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        grey = float(rng.uniform(40.0, 210.0))
        cv2.line(image, p1, p2, (grey, grey, grey), int(rng.integers(1, 4)), cv2.LINE_AA)
    return image


def _sensor_noise(rng: np.random.Generator, shape: tuple[int, ...]) -> npt.NDArray[np.float32]:
    """Zero-mean triangular noise, std ≈ 3.9, from the two nibbles of random bytes.

    Several times cheaper than Gaussian sampling at 640 px, and the eye cannot tell them apart.
    """
    raw = np.frombuffer(rng.bytes(int(np.prod(shape))), dtype=np.uint8).reshape(shape)
    noise = ((raw & 15) + (raw >> 4)).astype(np.float32)
    noise -= 15.0
    noise *= 0.6
    return noise


def _reach(task: Task, radius: float, aspect: float) -> float:
    """How far a shape's labels reach from its centre, pixels: kept clear of borders and shapes.

    Unit outlines lie within radius 1, so a shape reaches ``radius · max(aspect, 1)``. Its
    oriented box reaches further: the bounding rectangle of a unit outline lies in [-1, 1]², so
    the stretched corners are up to ``radius · hypot(aspect, 1)`` away, and a corner outside the
    image would be an invalid OBB label row.
    """
    if task == "obb":
        return radius * float(np.hypot(aspect, 1.0))
    return radius * max(aspect, 1.0)


def _place(
    rng: np.random.Generator, task: Task, imgsz: int, max_objects: int
) -> list[ShapeInstance]:
    placed: list[ShapeInstance] = []
    for _ in range(int(rng.integers(1, max_objects + 1))):
        for _ in range(_PLACEMENT_ATTEMPTS):
            aspect = float(rng.uniform(1.5, 2.5) if task == "obb" else rng.uniform(0.75, 1.33))
            radius = float(rng.uniform(0.04, 0.16) * imgsz)
            extent = _reach(task, radius, aspect)
            if 2 * extent + 4 >= imgsz:
                continue
            centre = (
                float(rng.uniform(extent + 2, imgsz - extent - 2)),
                float(rng.uniform(extent + 2, imgsz - extent - 2)),
            )
            candidate = ShapeInstance(
                cls=int(rng.integers(0, len(SHAPE_CLASSES))),
                centre=centre,
                radius=radius,
                angle=float(rng.uniform(-np.pi, np.pi)),
                aspect=aspect,
            )
            if all(
                np.hypot(centre[0] - o.centre[0], centre[1] - o.centre[1])
                > extent + _reach(task, o.radius, o.aspect) + 3
                for o in placed
            ):
                placed.append(candidate)
                break
    return placed


def render_sample(
    rng: np.random.Generator,
    *,
    task: Task,
    imgsz: int,
    max_objects: int,
    image_path: Path,
) -> tuple[UInt8Image, ImageLabels]:
    """Draw one synthetic image and its labels in memory.

    Args:
        rng: the image's own generator (determinism: module docstring).
        task: which label fields to fill.
        imgsz: the square image side, pixels.
        max_objects: at most this many shapes (at least one; fewer when space runs out).
        image_path: recorded in the labels (the file need not exist).

    Returns:
        ``(image, labels)``: (imgsz, imgsz, 3) uint8 BGR, and labels normalised to the image.
    """
    shapes = _place(rng, task, imgsz, max_objects)
    image = _background(rng, imgsz, imgsz)
    rows = LabelRows()
    scale = 1 << _SUBPIXEL_BITS
    for shape in shapes:
        polygon = shape.polygon()
        jitter = rng.uniform(-15.0, 15.0, size=3)
        colour = tuple(
            float(c) for c in np.clip(np.asarray(SHAPE_CLASSES[shape.cls].colour) + jitter, 0, 255)
        )
        # OpenCV puts pixel i's centre at i, labels (and anchors) at i + 0.5: shift by half a pixel
        # so the filled pixels are exactly those whose centre lies inside the labelled polygon.
        fixed = np.round((polygon - 0.5) * scale).astype(np.int32)
        cv2.fillPoly(image, [fixed], colour, cv2.LINE_8, _SUBPIXEL_BITS)
        normalised = polygon / np.float32(imgsz)
        rows.classes.append(shape.cls)
        rows.boxes.append(hull_box(normalised))
        rows.polygons.append(normalised)
        keypoints = shape.keypoints()
        keypoints[:, :2] /= np.float32(imgsz)
        rows.keypoints.append(keypoints)
        rows.corners.append(shape.corners() / np.float32(imgsz))
        rows.difficult.append(False)
    image += _sensor_noise(rng, image.shape)
    np.clip(image, 0.0, 255.0, out=image)
    pixels = np.asarray(cv2.convertScaleAbs(image), np.uint8)  # rounds to nearest
    return pixels, rows.build(image_path, task, NUM_KEYPOINTS, str(image_path))


def _write_yaml(root: Path, task: Task) -> Path:
    data: dict[str, object] = {
        "path": str(root),
        "train": "images/train",
        "val": "images/val",
        "task": task,
        "nc": len(SHAPE_CLASSES),
        "names": [c.name for c in SHAPE_CLASSES],
    }
    if task == "pose":
        data["kpt_shape"] = [NUM_KEYPOINTS, 3]
        data["flip_idx"] = list(FLIP_IDX)
    path = root / "data.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def generate_synthetic(
    root: str | Path,
    *,
    task: Task = "detect",
    num_train: int = 64,
    num_val: int = 16,
    imgsz: int = 640,
    seed: int = 0,
    max_objects: int = 6,
    image_suffix: str = ".jpg",
) -> Path:
    """Write a synthetic shapes dataset in the Ultralytics layout.

    Args:
        root: output folder (created). Files of an earlier synthetic set there (``NNNNNN.jpg``,
            ``.png``, ``.txt`` in the split folders) that this set does not write are removed, so
            a smaller regeneration leaves no stale images; no other file is touched.
        task: ``detect``, ``segment``, ``pose`` or ``obb``: which rows the label files hold.
        num_train: images in ``train``.
        num_val: images in ``val``.
        imgsz: square image side, pixels (>= 64).
        seed: everything drawn follows from it (module docstring).
        max_objects: at most this many shapes per image.
        image_suffix: ``.jpg`` (quality 95, small files) or ``.png`` (lossless: exact colours).

    Returns:
        The written ``data.yaml`` (absolute ``path``, ``task``, and for pose ``kpt_shape`` and
        ``flip_idx``).

    Raises:
        TrainConfigError: an unknown task or suffix, a negative count, ``imgsz < 64`` or
            ``max_objects < 1``.
    """
    if task not in TASKS:
        raise TrainConfigError(f"task {task!r} is unknown; use one of {TASKS!r}")
    if image_suffix not in (".jpg", ".png"):
        raise TrainConfigError(
            f"image_suffix {image_suffix!r} is not supported; use '.jpg' or '.png'"
        )
    if num_train < 0 or num_val < 0:
        raise TrainConfigError(f"image counts must be >= 0, got {num_train!r} and {num_val!r}")
    if imgsz < 64 or max_objects < 1:
        raise TrainConfigError(
            f"need imgsz >= 64 and max_objects >= 1, got {imgsz!r}, {max_objects!r}"
        )
    out = Path(root).expanduser().resolve()
    params = (
        [cv2.IMWRITE_JPEG_QUALITY, 95]
        if image_suffix == ".jpg"
        else [cv2.IMWRITE_PNG_COMPRESSION, 1]
    )
    for split, count in (("train", num_train), ("val", num_val)):
        (out / "images" / split).mkdir(parents=True, exist_ok=True)
        (out / "labels" / split).mkdir(parents=True, exist_ok=True)
        for index in range(count):
            rng = np.random.default_rng([seed, _SPLIT_IDS[split], index])
            image_path = out / "images" / split / f"{index:06d}{image_suffix}"
            image, labels = render_sample(
                rng, task=task, imgsz=imgsz, max_objects=max_objects, image_path=image_path
            )
            write_image(image_path, image, params)
            write_label_file(out / "labels" / split / f"{index:06d}.txt", labels, task)
        _remove_stale(out / "images" / split, count, image_suffix)
        _remove_stale(out / "labels" / split, count, ".txt")
    return _write_yaml(out, task)


def _remove_stale(folder: Path, count: int, suffix: str) -> None:
    for path in folder.iterdir():
        if _GENERATED.fullmatch(path.name) and (int(path.stem) >= count or path.suffix != suffix):
            path.unlink()


__all__ = ["generate_synthetic", "render_sample"]
