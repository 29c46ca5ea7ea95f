"""How far two polygon rasterisers are from COCO's own (faster-coco-eval's ``frPyObjects``).

Compares, on seeded random star polygons (radius 3-30 px) in a 97 x 131 image, the pixel-centre
rule of :func:`lucid_yolo.train.geometry.polygon_mask` (the evaluator's ground truth) and the
OpenCV fill the training targets use (half-pixel shift, 1/16 px fixed point, ``LINE_8``) with the
COCO API's mask of the same polygon. Prints one JSON line per rasteriser: mean and min IoU with
COCO's mask, mean relative area bias, mean number of differing pixels.

``--targets IMGSZ`` measures instead what the training targets do to the synthetic segment set's
shapes at that input size: each polygon filled at prototype resolution (stride 4) by both rules,
area compared with the polygon's exact area.

Examples::

    uv run python tools/mask_rasterisers.py --polygons 300
    uv run python tools/mask_rasterisers.py --targets 640 --images 40
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np
from faster_coco_eval.core import mask as coco_mask

from lucid_yolo.train.data.augment.targets import MASK_STRIDE
from lucid_yolo.train.data.synthetic import render_sample
from lucid_yolo.train.geometry import polygon_mask

HEIGHT, WIDTH = 97, 131


def _coco(polygon: np.ndarray) -> np.ndarray:
    rle = coco_mask.frPyObjects([polygon.reshape(-1).tolist()], HEIGHT, WIDTH)
    return np.asarray(coco_mask.decode(rle)[..., 0], dtype=bool)


def _opencv(polygon: np.ndarray) -> np.ndarray:
    mask = np.zeros((HEIGHT, WIDTH), np.uint8)
    points = np.round((polygon - 0.5) * 16).astype(np.int32)
    cv2.fillPoly(mask, [points], 1, lineType=cv2.LINE_8, shift=4)
    return mask.astype(bool)


def _opencv_at(polygon: np.ndarray, height: int, width: int) -> np.ndarray:
    mask = np.zeros((height, width), np.uint8)
    points = np.round((polygon - 0.5) * 16).astype(np.int32)
    cv2.fillPoly(mask, [points], 1, lineType=cv2.LINE_8, shift=4)
    return mask.astype(bool)


def target_bias(imgsz: int, images: int) -> None:
    """Area bias of stride-4 training targets on the synthetic segment shapes, per rule."""
    side = imgsz // MASK_STRIDE
    bias: dict[str, list[float]] = {"pixel-centre": [], "opencv-fill": []}
    for index in range(images):
        rng = np.random.default_rng((0, index))
        _, labels = render_sample(
            rng, task="segment", imgsz=imgsz, max_objects=8, image_path=Path("x.png")
        )
        for normalised in labels.polygons or []:
            polygon = normalised.astype(np.float64) * imgsz / MASK_STRIDE
            x, y = polygon[:, 0], polygon[:, 1]
            area = abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2
            bias["pixel-centre"].append(polygon_mask(polygon, side, side).sum() / area - 1)
            bias["opencv-fill"].append(_opencv_at(polygon, side, side).sum() / area - 1)
    for name, values in bias.items():
        print(
            json.dumps(
                {
                    "targets": name,
                    "imgsz": imgsz,
                    "instances": len(values),
                    "area_bias_mean": round(float(np.mean(values)), 4),
                    "area_bias_median": round(float(np.median(values)), 4),
                }
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--polygons", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", type=int, default=None, metavar="IMGSZ")
    parser.add_argument("--images", type=int, default=40)
    args = parser.parse_args()
    if args.targets is not None:
        target_bias(args.targets, args.images)
        return
    rng = np.random.default_rng(args.seed)
    rows: dict[str, list[tuple[float, float, int]]] = {"pixel-centre": [], "opencv-fill": []}
    for _ in range(args.polygons):
        n = int(rng.integers(3, 12))
        centre = rng.uniform([20, 20], [WIDTH - 20, HEIGHT - 20])
        angles = np.sort(rng.uniform(0, 2 * np.pi, n))
        radius = rng.uniform(3, 30) * rng.uniform(0.5, 1, n)
        polygon = centre + radius[:, None] * np.stack([np.cos(angles), np.sin(angles)], axis=1)
        reference = _coco(polygon)
        if not reference.any():
            continue
        area = reference.sum()
        for name, mask in (
            ("pixel-centre", polygon_mask(polygon, HEIGHT, WIDTH)),
            ("opencv-fill", _opencv(polygon)),
        ):
            iou = (mask & reference).sum() / (mask | reference).sum()
            rows[name].append(
                (float(iou), float((mask.sum() - area) / area), int((mask != reference).sum()))
            )
    for name, values in rows.items():
        table = np.array(values)
        print(
            json.dumps(
                {
                    "rasteriser": name,
                    "polygons": len(values),
                    "iou_mean": round(float(table[:, 0].mean()), 4),
                    "iou_min": round(float(table[:, 0].min()), 4),
                    "area_bias_mean": round(float(table[:, 1].mean()), 4),
                    "pixels_differing_mean": round(float(table[:, 2].mean()), 2),
                }
            )
        )


if __name__ == "__main__":
    main()
