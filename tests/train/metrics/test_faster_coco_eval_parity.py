"""Our mAP equals faster-coco-eval's (the reference COCO evaluator) on seeded random sets.

Each scenario mixes what the COCO rules care about: predictions that hit, miss and duplicate
targets, crowd targets, classes without predictions or without targets, more predictions per image
and class than ``max_dets``, tied (rounded) scores and empty images.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from faster_coco_eval import COCO, COCOeval_faster
from faster_coco_eval.core import mask as coco_mask
from hypothesis import given, settings
from hypothesis import strategies as st

from lucid_yolo.train.metrics import (
    ImagePredictions,
    ImageTargets,
    MeanAveragePrecision,
    keypoint_sigmas,
)

NUM_CLASSES = 4
HEIGHT, WIDTH = 48, 64


def _random_boxes(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, 4) xyxy boxes inside the image."""
    xy = rng.uniform(0, [WIDTH - 8, HEIGHT - 8], size=(n, 2))
    wh = rng.uniform(10, [WIDTH / 2, HEIGHT / 2], size=(n, 2))
    return np.concatenate([xy, np.minimum(xy + wh, [WIDTH, HEIGHT])], axis=1)


def _jitter(rng: np.random.Generator, boxes: np.ndarray, scale: float) -> np.ndarray:
    out = boxes + rng.normal(0, scale, size=boxes.shape)
    out[:, 2:] = np.maximum(out[:, 2:], out[:, :2] + 1)
    return out


def _scene(rng: np.random.Generator, index: int) -> dict[str, np.ndarray]:
    """One image: targets and predictions (boxes, classes, crowd, scores)."""
    m = 0 if index % 7 == 3 else int(rng.integers(1, 7))
    t_boxes = _random_boxes(rng, m)
    t_classes = rng.integers(0, NUM_CLASSES - 1, size=m)  # the last class never has a target
    crowd = rng.random(m) < 0.15
    hits = rng.random(m) < 0.8
    p_boxes = [_jitter(rng, t_boxes[hits], 1.0), _jitter(rng, t_boxes[hits], 2.5)]
    p_classes = [t_classes[hits], t_classes[hits]]
    busy = index % 5 == 4  # high-scored clutter pushes this image's hits past max_dets = 100
    extra = 120 if busy else int(rng.integers(0, 5))
    p_boxes.append(_random_boxes(rng, extra))
    clutter = np.zeros(extra, dtype=np.int64) if busy else rng.integers(0, NUM_CLASSES, extra)
    p_classes.append(clutter)
    boxes = np.concatenate(p_boxes)
    hit_weight, extra_weight = (0.3, 1.0) if busy else (1.0, 0.6)
    n_hits = 2 * int(hits.sum())
    weight = np.concatenate([np.full(n_hits, hit_weight), np.full(extra, extra_weight)])
    return {
        "t_boxes": t_boxes,
        "t_classes": t_classes,
        "crowd": crowd,
        "p_boxes": boxes,
        "p_classes": np.concatenate(p_classes),
        "scores": np.round(rng.random(boxes.shape[0]) * weight, 2),  # rounding makes ties
    }


def _xywh(box: np.ndarray) -> list[float]:
    return [float(box[0]), float(box[1]), float(box[2] - box[0]), float(box[3] - box[1])]


def _coco_eval(gt: dict[str, Any], results: list[dict[str, Any]], iou_type: str, **kw: Any) -> Any:
    coco_gt = COCO(gt)
    coco_dt = coco_gt.loadRes(results)
    evaluator = COCOeval_faster(coco_gt, coco_dt, iou_type, print_function=lambda *_: None, **kw)
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    return evaluator.stats


def _gt_skeleton(num_images: int) -> dict[str, Any]:
    return {
        "images": [{"id": i + 1, "height": HEIGHT, "width": WIDTH} for i in range(num_images)],
        "categories": [{"id": c + 1, "name": str(c)} for c in range(NUM_CLASSES)],
        "annotations": [],
    }


def _box_maps(scenes: list[dict[str, np.ndarray]]) -> tuple[dict[str, float], Any]:
    """Our box metrics and the reference stats on the same scenes."""
    gt, results = _gt_skeleton(len(scenes)), []
    metric = MeanAveragePrecision(kinds=("box",))
    for i, s in enumerate(scenes):
        for box, c, crowd in zip(s["t_boxes"], s["t_classes"], s["crowd"], strict=True):
            xywh = _xywh(box)
            gt["annotations"].append(
                {
                    "id": len(gt["annotations"]) + 1,
                    "image_id": i + 1,
                    "category_id": int(c) + 1,
                    "bbox": xywh,
                    "area": xywh[2] * xywh[3],
                    "iscrowd": int(crowd),
                }
            )
        for box, c, score in zip(s["p_boxes"], s["p_classes"], s["scores"], strict=True):
            results.append(
                {
                    "image_id": i + 1,
                    "category_id": int(c) + 1,
                    "bbox": _xywh(box),
                    "score": float(score),
                }
            )
        metric.update(
            [
                ImagePredictions(
                    torch.from_numpy(s["scores"]),
                    torch.from_numpy(s["p_classes"]),
                    boxes=torch.from_numpy(s["p_boxes"]),
                )
            ],
            [
                ImageTargets(
                    torch.from_numpy(s["t_classes"]),
                    boxes=torch.from_numpy(s["t_boxes"]),
                    iscrowd=torch.from_numpy(s["crowd"]),
                )
            ],
        )
    return metric.compute(), _coco_eval(gt, results, "bbox")


def test_box_map_equals_faster_coco_eval() -> None:
    rng = np.random.default_rng(0)
    ours, stats = _box_maps([_scene(rng, i) for i in range(40)])
    assert ours["box/mAP50-95"] == pytest.approx(stats[0], abs=1e-6)
    assert ours["box/mAP50"] == pytest.approx(stats[1], abs=1e-6)
    assert 0.1 < stats[0] < 0.9, "the scenario should be neither trivial nor hopeless"


@settings(max_examples=25, deadline=None, database=None)
@given(seed=st.integers(0, 2**32 - 1), first=st.integers(0, 4), count=st.integers(1, 6))
def test_box_map_equals_faster_coco_eval_on_generated_sets(
    seed: int, first: int, count: int
) -> None:
    rng = np.random.default_rng(seed)
    ours, stats = _box_maps([_scene(rng, i) for i in range(first, first + count)])
    if stats[0] < 0:  # the reference's "no counted target" sentinel; ours reports 0
        assert ours["box/mAP50-95"] == 0.0
        return
    assert ours["box/mAP50-95"] == pytest.approx(stats[0], abs=1e-6)
    assert ours["box/mAP50"] == pytest.approx(stats[1], abs=1e-6)


def _mask_of(box: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(H, W) bool ellipse inscribed in ``box``, with a few random pixels flipped."""
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH] + 0.5
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    rx, ry = max((box[2] - box[0]) / 2, 1.0), max((box[3] - box[1]) / 2, 1.0)
    mask = ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1.0
    flip = rng.random(mask.shape) < 0.002
    return np.asarray(mask ^ flip)


def _rle(mask: np.ndarray) -> dict[str, Any]:
    rle = dict(coco_mask.encode(np.asfortranarray(mask.astype(np.uint8))))
    if isinstance(rle["counts"], bytes):
        rle["counts"] = rle["counts"].decode("ascii")
    return rle


def test_mask_map_equals_faster_coco_eval() -> None:
    rng = np.random.default_rng(1)
    scenes = [_scene(rng, i) for i in range(12)]
    gt, results = _gt_skeleton(len(scenes)), []
    metric = MeanAveragePrecision(kinds=("mask",))
    for i, s in enumerate(scenes):
        empty = np.zeros((0, HEIGHT, WIDTH), dtype=bool)
        t_masks = np.stack([_mask_of(b, rng) for b in s["t_boxes"]]) if len(s["t_boxes"]) else empty
        p_masks = np.stack([_mask_of(b, rng) for b in s["p_boxes"]]) if len(s["p_boxes"]) else empty
        for j, (c, crowd) in enumerate(zip(s["t_classes"], s["crowd"], strict=True)):
            gt["annotations"].append(
                {
                    "id": len(gt["annotations"]) + 1,
                    "image_id": i + 1,
                    "category_id": int(c) + 1,
                    "segmentation": _rle(t_masks[j]),
                    "bbox": _xywh(s["t_boxes"][j]),
                    "area": float(t_masks[j].sum()),
                    "iscrowd": int(crowd),
                }
            )
        for j, (c, score) in enumerate(zip(s["p_classes"], s["scores"], strict=True)):
            results.append(
                {
                    "image_id": i + 1,
                    "category_id": int(c) + 1,
                    "segmentation": _rle(p_masks[j]),
                    "score": float(score),
                }
            )
        metric.update(
            [
                ImagePredictions(
                    torch.from_numpy(s["scores"]),
                    torch.from_numpy(s["p_classes"]),
                    masks=torch.from_numpy(p_masks),
                )
            ],
            [
                ImageTargets(
                    torch.from_numpy(s["t_classes"]),
                    masks=torch.from_numpy(t_masks),
                    iscrowd=torch.from_numpy(s["crowd"]),
                )
            ],
        )
    stats = _coco_eval(gt, results, "segm")
    ours = metric.compute()
    assert ours["mask/mAP50-95"] == pytest.approx(stats[0], abs=1e-6)
    assert ours["mask/mAP50"] == pytest.approx(stats[1], abs=1e-6)
    assert 0.1 < stats[0] < 0.9, "the scenario should be neither trivial nor hopeless"


def _pose_scene(rng: np.random.Generator, index: int, K: int) -> dict[str, np.ndarray]:
    s = _scene(rng, index)
    m, n = s["t_boxes"].shape[0], s["p_boxes"].shape[0]
    t_boxes = s["t_boxes"]
    u = rng.random((m, K, 2))
    t_kpts = np.zeros((m, K, 3))
    t_kpts[..., 0] = t_boxes[:, None, 0] + u[..., 0] * (t_boxes[:, None, 2] - t_boxes[:, None, 0])
    t_kpts[..., 1] = t_boxes[:, None, 1] + u[..., 1] * (t_boxes[:, None, 3] - t_boxes[:, None, 1])
    t_kpts[..., 2] = rng.choice([0, 1, 2], size=(m, K), p=[0.3, 0.2, 0.5])
    t_kpts[: m // 3, :, 2] = np.where(rng.random() < 0.5, 0, t_kpts[: m // 3, :, 2])
    t_kpts[t_kpts[..., 2] == 0, :2] = 0.0
    hits = m and min(n, 2 * m)
    p_kpts = rng.uniform(0, [WIDTH, HEIGHT], size=(n, K, 2))
    source = np.concatenate([np.arange(m), np.arange(m)])[:hits]
    visible_xy = np.where(t_kpts[source, :, 2:] > 0, t_kpts[source, :, :2], p_kpts[:hits])
    p_kpts[:hits] = visible_xy + rng.normal(0, 0.6, size=(hits, K, 2))
    s["t_kpts"] = t_kpts
    s["p_kpts"] = np.concatenate([p_kpts, rng.random((n, K, 1))], axis=2)
    s["p_classes"][: len(source)] = s["t_classes"][source]
    return s


@pytest.mark.parametrize("K", [17, 5])
def test_keypoint_map_equals_faster_coco_eval(K: int) -> None:
    rng = np.random.default_rng(2 + K)
    scenes = [_pose_scene(rng, i, K) for i in range(30)]
    gt, results = _gt_skeleton(len(scenes)), []
    metric = MeanAveragePrecision(kinds=("pose",))
    for i, s in enumerate(scenes):
        rows = zip(s["t_boxes"], s["t_classes"], s["crowd"], s["t_kpts"], strict=True)
        for box, c, crowd, kpts in rows:
            xywh = _xywh(box)
            gt["annotations"].append(
                {
                    "id": len(gt["annotations"]) + 1,
                    "image_id": i + 1,
                    "category_id": int(c) + 1,
                    "bbox": xywh,
                    "area": xywh[2] * xywh[3],
                    "iscrowd": int(crowd),
                    "keypoints": kpts.reshape(-1).tolist(),
                    "num_keypoints": int((kpts[:, 2] > 0).sum()),
                }
            )
        for kpts, c, score in zip(s["p_kpts"], s["p_classes"], s["scores"], strict=True):
            results.append(
                {
                    "image_id": i + 1,
                    "category_id": int(c) + 1,
                    "keypoints": kpts.reshape(-1).tolist(),
                    "score": float(score),
                }
            )
        metric.update(
            [
                ImagePredictions(
                    torch.from_numpy(s["scores"]),
                    torch.from_numpy(s["p_classes"]),
                    keypoints=torch.from_numpy(s["p_kpts"]),
                )
            ],
            [
                ImageTargets(
                    torch.from_numpy(s["t_classes"]),
                    boxes=torch.from_numpy(s["t_boxes"]),
                    keypoints=torch.from_numpy(s["t_kpts"]),
                    iscrowd=torch.from_numpy(s["crowd"]),
                )
            ],
        )
    stats = _coco_eval(gt, results, "keypoints", kpt_oks_sigmas=keypoint_sigmas(K).tolist())
    ours = metric.compute()
    assert ours["pose/mAP50-95"] == pytest.approx(stats[0], abs=1e-6)
    assert ours["pose/mAP50"] == pytest.approx(stats[1], abs=1e-6)
    assert 0.1 < stats[0] < 0.9, "the scenario should be neither trivial nor hopeless"


def test_box_equal_overlap_tie_goes_to_the_later_target_as_in_faster_coco_eval() -> None:
    targets = np.array([[0.0, 0.0, 10.0, 10.0], [6.0, 0.0, 16.0, 10.0]])
    preds = np.array([[3.0, 0.0, 13.0, 10.0], [-1.0, 0.0, 9.0, 10.0]])  # first: equal IoU to both
    gt = _gt_skeleton(1)
    gt["annotations"] = [
        {"id": j + 1, "image_id": 1, "category_id": 1, "bbox": _xywh(b), "area": 100.0}
        for j, b in enumerate(targets)
    ]
    results = [
        {"image_id": 1, "category_id": 1, "bbox": _xywh(b), "score": score}
        for b, score in zip(preds, [0.9, 0.8], strict=True)
    ]
    metric = MeanAveragePrecision(kinds=("box",))
    metric.update(
        [ImagePredictions(torch.tensor([0.9, 0.8]), torch.tensor([0, 0]), torch.from_numpy(preds))],
        [ImageTargets(torch.tensor([0, 0]), boxes=torch.from_numpy(targets))],
    )
    stats = _coco_eval(gt, results, "bbox")
    ours = metric.compute()
    assert stats[1] == pytest.approx(1.0)
    assert ours["box/mAP50-95"] == pytest.approx(stats[0], abs=1e-6)
    assert ours["box/mAP50"] == pytest.approx(stats[1], abs=1e-6)
