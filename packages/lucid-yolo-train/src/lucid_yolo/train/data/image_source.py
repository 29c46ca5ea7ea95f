"""Unlabelled images to predict: an image file or a folder of images, as label-free entries.

Prediction reuses the evaluation path of :class:`~lucid_yolo.train.data.dataset.YoloDataset`
(decode as RGB, resize the long side, letterbox onto a grey square) by giving it one
:class:`ImageLabels` without instances per image, so predictions are mapped back to source pixels
exactly as validation maps them before scoring.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lucid_yolo.train.data.errors import DatasetConfigError
from lucid_yolo.train.data.image_probe import IMAGE_SUFFIXES
from lucid_yolo.train.data.labels import ImageLabels


def list_images(source: str | Path) -> list[Path]:
    """The images of ``source``: the file itself, or a folder's images (not recursive), sorted.

    Raises:
        DatasetConfigError: nothing at ``source``, no image in the folder, or two images share a
            file stem (outputs named after the stem would overwrite each other).
    """
    path = Path(source).expanduser()
    if path.is_file():
        images = [path]
    elif path.is_dir():
        images = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not images:
            raise DatasetConfigError(
                f"source {str(source)!r} holds no image ({', '.join(sorted(IMAGE_SUFFIXES))}); "
                "point it at an image or a folder of images"
            )
    else:
        raise DatasetConfigError(f"source {str(source)!r}: no such file or folder; check the path")
    stems = [p.stem for p in images]
    clash = sorted({s for s in stems if stems.count(s) > 1})
    if clash:
        raise DatasetConfigError(
            f"source {str(source)!r}: images {clash!r} share a name with different suffixes; "
            "their outputs would collide, predict them separately"
        )
    return images


def unlabelled(images: list[Path]) -> list[ImageLabels]:
    """One :class:`ImageLabels` without instances per image, in order (image id = index)."""
    return [
        ImageLabels(
            image_path=image,
            classes=np.zeros(0, dtype=np.int64),
            boxes=np.zeros((0, 4), dtype=np.float32),
            source=str(image),
        )
        for image in images
    ]


__all__ = ["list_images", "unlabelled"]
