"""Evaluator: the ground truth it scores comes from the batch, ignore flags included.

The end-to-end checks run the evaluation path (data module, letterbox, decode, source-size
masks, metric) on raw outputs built from the targets, and compares the result with
faster-coco-eval over the same predictions written as COCO results, against the dataset written
as COCO json: once with polygons only, once with RLE ground truth (a ring with its hole, crowds
as uncompressed RLEs).
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import cv2
import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from dispatched_ops import DispatchedOps
from faster_coco_eval import COCO, COCOeval_faster
from torch import Tensor

from lucid_yolo.models.decode import anchor_grid
from lucid_yolo.models.decode import masks as decode_masks
from lucid_yolo.models.registry import TASK_SUFFIXES
from lucid_yolo.train import Evaluator, ReplayConfig, YoloModule, source_mask_cache
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.data.collate import collate
from lucid_yolo.train.data.datamodule import YoloDataModule
from lucid_yolo.train.data.dataset import YoloDataset
from lucid_yolo.train.data.formats import read_coco, read_dota, write_coco
from lucid_yolo.train.data.labels import ImageLabels
from lucid_yolo.train.data.prepared import PreparedDataset
from lucid_yolo.train.data.synthetic import generate_synthetic
from lucid_yolo.train.evaluation import TASK_KINDS
from lucid_yolo.train.geometry import (
    RunLengthMask,
    counts_from_string,
    polygon_mask,
    rle_encode,
    source_masks,
)
from lucid_yolo.train.metrics import MetricsInputError, host_shortcuts
from lucid_yolo.train.scoring_replay import ScoringReplay

SYNC_WARNING = "called a synchronizing CUDA operation"
"""torch's warning per synchronisation under its debug mode (not its notice, when switched on,
that the mode "does not yet detect all synchronizing operations")."""


def _dota_batch(tmp_path: Path) -> Batch:
    images, label_dir = tmp_path / "images", tmp_path / "labelTxt"
    images.mkdir()
    label_dir.mkdir()
    cv2.imwrite(str(images / "P1.png"), np.zeros((64, 128, 3), np.uint8))
    rows = "10 5 60 5 60 45 10 45 plane 0\n70 10 90 10 90 30 70 30 ship 1\n"
    (label_dir / "P1.txt").write_text(rows)
    dataset = YoloDataset(read_dota(images, label_dir).labels, task="obb", imgsz=128)
    return collate([dataset[0]])


def test_evaluator_targets_mark_dota_difficult_as_ignored(tmp_path: Path) -> None:
    batch = _dota_batch(tmp_path)
    assert batch["ignore"][0, :3].tolist() == [False, True, False]
    evaluator = Evaluator("obb", strides=(8, 16, 32), conf=0.001, max_det=10)
    targets = evaluator.targets(batch, 0)
    assert targets.difficult is not None
    assert targets.difficult.tolist() == [False, True]
    assert targets.ignore_flags().tolist() == [False, True]
    assert targets.rboxes is not None
    torch.testing.assert_close(targets.rboxes[1, :4], torch.tensor([80.0, 20.0, 20.0, 20.0]))


def _segment_labels(tmp_path: Path, crowd: bool) -> list[ImageLabels]:
    """Two images of other shapes than the square input, rectilinear polygons on pixel corners."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    specs = [
        ((60, 100), [(0, [(10, 5), (50, 5), (50, 40), (10, 40)])], [False]),
        (
            (90, 70),
            [
                (1, [(5, 5), (40, 5), (40, 20), (20, 20), (20, 60), (5, 60)]),
                (2, [(30, 50), (65, 50), (65, 85), (30, 85)]),
            ],
            [False, crowd],
        ),
        (
            (64, 64),
            [
                (0, [(4, 4), (30, 4), (30, 30), (4, 30)]),
                (2, [(34, 8), (60, 8), (60, 40), (48, 40), (48, 60), (34, 60)]),
                (1, [(6, 40), (26, 40), (26, 58), (6, 58)]),
            ],
            [False, False, False],
        ),
        (
            (48, 120),
            [
                (1, [(2, 2), (60, 2), (60, 44), (2, 44)]),
                (0, [(70, 10), (110, 10), (110, 20), (90, 20), (90, 40), (70, 40)]),
            ],
            [False, False],
        ),
    ]
    labels = []
    for index, ((height, width), instances, flags) in enumerate(specs):
        path = tmp_path / f"image{index}.png"
        cv2.imwrite(str(path), np.zeros((height, width, 3), np.uint8))
        size = np.array([width, height], dtype=np.float32)
        polygons = [np.array(points, dtype=np.float32) / size for _, points in instances]
        labels.append(
            ImageLabels(
                image_path=path,
                classes=np.array([c for c, _ in instances], dtype=np.int64),
                boxes=np.stack([np.concatenate([p.min(0), p.max(0)]) for p in polygons]),
                polygons=polygons,
                difficult=np.array(flags, dtype=np.bool_),
            )
        )
    return labels


def _segment_batch(labels: list[ImageLabels], imgsz: int = 64) -> Batch:
    dataset = YoloDataset(labels, task="segment", imgsz=imgsz)
    return collate([dataset[i] for i in range(len(dataset))])


def test_evaluator_segment_targets_are_the_polygons_at_source_size(tmp_path: Path) -> None:
    labels = _segment_labels(tmp_path, crowd=False)
    batch = _segment_batch(labels)
    evaluator = Evaluator("segment", strides=(8, 16, 32), conf=0.001, max_det=10)
    targets = evaluator.targets(batch, 1)
    assert targets.masks is not None
    assert targets.masks.shape == (2, 90, 70)
    expected = np.zeros((90, 70), dtype=bool)
    expected[5:20, 5:40] = True
    expected[20:60, 5:20] = True
    assert np.array_equal(targets.masks[0].numpy(), expected)
    assert targets.masks[1].sum().item() == 35 * 35


def test_evaluator_segment_targets_score_coco_crowds_by_prediction_area(tmp_path: Path) -> None:
    batch = _segment_batch(_segment_labels(tmp_path, crowd=True))
    evaluator = Evaluator("segment", strides=(8, 16, 32), conf=0.001, max_det=10)
    targets = evaluator.targets(batch, 1)
    assert targets.iscrowd is not None
    assert targets.iscrowd.tolist() == [False, True]
    assert targets.difficult is None


def test_evaluator_segment_targets_need_source_shapes(tmp_path: Path) -> None:
    batch = _segment_batch(_segment_labels(tmp_path, crowd=False))
    del batch["source_shapes"]
    evaluator = Evaluator("segment", strides=(8, 16, 32), conf=0.001, max_det=10)
    with pytest.raises(MetricsInputError, match=r"batch\['source_shapes'\]"):
        evaluator.targets(batch, 0)


def _oracle_outputs(batch: Batch, num_classes: int, seed: int) -> dict[str, Tensor]:
    """Raw one-to-one outputs that find every instance twice, imperfectly, plus clutter.

    Each instance gets a close and a sloppier prediction (jittered box, a mask from its
    quarter-resolution target with noise and, for the sloppy one, shifted one prototype pixel),
    and every image a few low-scored boxes of random classes: a mix that puts the mask IoUs
    across COCO's thresholds. A crowd also gets a small box inside it, which COCO's crowd rule
    (intersection over the prediction's area) ignores and IoU would count as a false positive.
    """
    rng = np.random.default_rng(seed)
    B, _, H, W = batch["images"].shape
    points, point_strides = anchor_grid((H, W), (8, 16, 32))
    A, N = points.shape[0], batch["classes"].shape[1]
    M = 2 * N + 1
    cls = torch.full((B, num_classes, A), -12.0)
    box = torch.ones(B, 4, A)
    coef = torch.zeros(B, M, A)
    protos = torch.full((B, M, H // 4, W // 4), -4.0)
    protos[:, -1] = torch.from_numpy(rng.normal(0.0, 3.0, (B, H // 4, W // 4))).float()
    for i in range(B):
        free = [int(a) for a in rng.permutation(A)]
        for j in torch.nonzero(batch["valid"][i]).flatten().tolist():
            target = batch["masks"][i, j].float() * 8.0 - 4.0
            for copy in range(2):
                a = free.pop()
                jitter = torch.from_numpy(rng.normal(0.0, 1.0 + 2.0 * copy, 4)).float()
                x1, y1, x2, y2 = (batch["boxes"][i, j] + jitter).tolist()
                px, py = points[a].tolist()
                box[i, :, a] = torch.tensor([px - x1, py - y1, x2 - px, y2 - py]) / point_strides[a]
                score = rng.uniform(0.5, 0.95) if copy == 0 else rng.uniform(0.1, 0.6)
                cls[i, int(batch["classes"][i, j]), a] = float(np.log(score / (1 - score)))
                channel = 2 * j + copy
                noise = torch.from_numpy(rng.normal(0.0, 2.5, target.shape)).float()
                protos[i, channel] = torch.roll(target, shifts=copy, dims=1) + noise
                coef[i, channel, a] = 1.0
            if batch["ignore"][i, j]:
                a = free.pop()
                x1, y1, x2, y2 = batch["boxes"][i, j].tolist()
                x2, y2 = (x1 + x2) / 2, (y1 + y2) / 2
                px, py = points[a].tolist()
                box[i, :, a] = torch.tensor([px - x1, py - y1, x2 - px, y2 - py]) / point_strides[a]
                cls[i, int(batch["classes"][i, j]), a] = 2.0
                coef[i, 2 * j, a] = 1.0
        for _ in range(3):
            a = free.pop()
            box[i, :, a] = torch.from_numpy(rng.uniform(0.5, 3.0, 4)).float()
            cls[i, int(rng.integers(num_classes)), a] = float(rng.uniform(-5.0, -1.5))
            coef[i, -1, a] = 1.0
    return {"o2o.box": box, "o2o.cls": cls, "o2o.mask_coef": coef, "protos": protos}


def _coco_results(predictions: list[dict[str, Tensor]]) -> list[dict[str, Any]]:
    results = []
    for record in predictions:
        image_id = int(record["image_id"]) + 1  # write_coco numbers images from 1, in order
        for j in range(record["scores"].shape[0]):
            x1, y1, x2, y2 = record["boxes"][j].tolist()
            results.append(
                {
                    "image_id": image_id,
                    "category_id": int(record["classes"][j]) + 1,
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "segmentation": rle_encode(record["masks"][j].numpy()),
                    "score": float(record["scores"][j]),
                }
            )
    return results


def _reference_stats(json_path: Path, results: list[dict[str, Any]], iou_type: str) -> Any:
    coco_gt = COCO(str(json_path))
    evaluator = COCOeval_faster(
        coco_gt, coco_gt.loadRes(results), iou_type, print_function=lambda *_: None
    )
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    return evaluator.stats


def _validate(
    labels: list[ImageLabels], names: tuple[str, ...], imgsz: int
) -> tuple[dict[str, float], list[dict[str, Tensor]]]:
    """The evaluation path over ``labels`` on the oracle's outputs: metrics and predictions."""
    data = YoloDataModule(
        PreparedDataset({"train": labels, "val": labels}, names, "segment"),
        imgsz=imgsz,
        batch_size=2,
        val_batch_size=2,
        workers=0,
    )
    data.setup("validate")
    evaluator = Evaluator("segment", strides=(8, 16, 32), conf=0.001, max_det=300)
    predictions = []
    for batch in data.val_dataloader():
        outputs = _oracle_outputs(batch, len(names), seed=0)
        evaluator.update(outputs, batch)
        predictions += evaluator.predictions(outputs, batch)
    return evaluator.compute(), predictions


def test_evaluator_makes_what_it_keeps_before_the_metric_scratch(tmp_path: Path) -> None:
    # a replayed fit's scratch is the graph pool's free memory, which the next replay writes:
    # the sampling tables, kept across batches, must be made outside it, and nothing changes
    names = ("a", "b", "c")
    labels = _segment_labels(tmp_path / "images", crowd=True)
    data = YoloDataModule(
        PreparedDataset({"train": labels, "val": labels}, names, "segment"),
        imgsz=64,
        batch_size=2,
        val_batch_size=2,
        workers=0,
    )
    data.setup("validate")

    def tables_made() -> int:
        return decode_masks._weights.cache_info().misses + (
            decode_masks._kept_centres.cache_info().misses
        )

    made_inside: list[int] = []

    @contextlib.contextmanager
    def scratch() -> Iterator[None]:
        before = tables_made()
        yield
        made_inside.append(tables_made() - before)

    decode_masks._weights.cache_clear()
    decode_masks._kept_centres.cache_clear()
    scratched = Evaluator(
        "segment", strides=(8, 16, 32), conf=0.001, max_det=300, mask_scratch=scratch
    )
    plain = Evaluator("segment", strides=(8, 16, 32), conf=0.001, max_det=300)
    for batch in data.val_dataloader():
        outputs = _oracle_outputs(batch, len(names), seed=0)
        scratched.update(outputs, batch)
        plain.update(outputs, batch)
    metrics = scratched.compute()
    assert metrics == plain.compute()
    assert made_inside, "a test of nothing: no scratch entered"
    assert set(made_inside) == {0}
    assert tables_made() > 0
    assert 0.2 < metrics["mask/mAP50-95"] < 0.9


def test_validation_mask_map_equals_faster_coco_eval_segm_with_a_crowd(tmp_path: Path) -> None:
    names = ("a", "b", "c")
    json_path = write_coco(
        _segment_labels(tmp_path / "images", crowd=True),
        tmp_path / "val.json",
        names=names,
        task="segment",
        images_root=tmp_path / "images",
    )
    coco = read_coco(json_path, tmp_path / "images", task="segment", crowd="ignore")
    ours, predictions = _validate(coco.labels, names, imgsz=64)
    results = _coco_results(predictions)
    segm = _reference_stats(json_path, results, "segm")
    bbox = _reference_stats(json_path, results, "bbox")
    assert 0.2 < ours["mask/mAP50-95"] < 0.9, "the predictions should be neither perfect nor lost"
    assert ours["mask/mAP50-95"] == pytest.approx(segm[0], abs=1e-9)
    assert ours["mask/mAP50"] == pytest.approx(segm[1], abs=1e-9)
    assert ours["box/mAP50-95"] == pytest.approx(bbox[0], abs=1e-6)


def _rect(height: int, width: int, y0: int, y1: int, x0: int, x1: int) -> np.ndarray:
    mask = np.zeros((height, width), np.uint8)
    mask[y0:y1, x0:x1] = 1
    return mask


def _rle_coco_json(root: Path) -> Path:
    """Three images whose ground truth mixes polygons (vertices on pixel corners), compact RLEs
    (one a ring: a 36 × 36 square with a 16 × 16 hole), and crowds as uncompressed RLEs, the form
    COCO gives its crowds; one crowd's class also has an ordinary instance in the same image.

    Two sizes round their short side at 96 px (80 × 100 → 76.8 rows of content, 70 × 90 → 74.67):
    the letterbox maps every box back with exactly the scale that brought it in."""
    ring = _rect(80, 100, 10, 46, 50, 86) - _rect(80, 100, 20, 36, 60, 76)
    l_shape = _rect(70, 90, 5, 55, 5, 20) + _rect(70, 90, 40, 55, 20, 45)
    images = [
        (
            (80, 100),
            [
                (1, [[5, 5, 40, 5, 40, 30, 5, 30]], 0),
                (2, ring, 0),
                (3, _rect(80, 100, 50, 78, 10, 90), 1),
            ],
        ),
        (
            (70, 90),
            [
                (1, l_shape, 0),
                (2, [[50, 8, 85, 8, 85, 30, 50, 30]], 0),
                (3, _rect(70, 90, 35, 65, 55, 85), 0),
            ],
        ),
        (
            (64, 64),
            [
                (1, _rect(64, 64, 2, 40, 2, 40), 1),
                (1, [[44, 40, 60, 40, 60, 60, 44, 60]], 0),
                (2, [[4, 46, 30, 46, 30, 50, 20, 50, 20, 62, 4, 62]], 0),
            ],
        ),
    ]
    coco_images, annotations = [], []
    for image_id, ((height, width), instances) in enumerate(images, start=1):
        name = f"image{image_id}.png"
        cv2.imwrite(str(root / name), np.zeros((height, width, 3), np.uint8))
        coco_images.append({"id": image_id, "file_name": name, "height": height, "width": width})
        for category, shape, iscrowd in instances:
            if isinstance(shape, list):
                xy = np.array(shape[0], dtype=np.float64).reshape(-1, 2)
                mask = polygon_mask(xy, height, width)
                segmentation: object = shape
            else:
                mask = shape.astype(bool)
                compact = str(rle_encode(shape)["counts"])
                counts: object = counts_from_string(compact) if iscrowd else compact
                segmentation = {"size": [height, width], "counts": counts}
            ys, xs = np.nonzero(mask)
            x0, y0 = int(xs.min()), int(ys.min())
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": category,
                    "bbox": [x0, y0, int(xs.max()) + 1 - x0, int(ys.max()) + 1 - y0],
                    "area": int(mask.sum()),
                    "iscrowd": iscrowd,
                    "segmentation": segmentation,
                }
            )
    categories = [{"id": i, "name": n} for i, n in enumerate("abc", start=1)]
    path = root / "val.json"
    document = {"images": coco_images, "annotations": annotations, "categories": categories}
    path.write_text(json.dumps(document))
    return path


def _holes_filled(labels: ImageLabels) -> ImageLabels:
    """The labels with every RLE replaced by its outline filled (what scoring lost before)."""
    if labels.rle_masks is None:
        return labels
    filled: list[RunLengthMask | None] = []
    for rle in labels.rle_masks:
        if rle is None:
            filled.append(None)
            continue
        mask = rle.decode()
        outlines, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
        cv2.drawContours(mask, outlines, -1, 1, thickness=-1)
        counts = str(rle_encode(mask)["counts"])
        filled.append(RunLengthMask.from_counts(counts, rle.height, rle.width))
    return replace(labels, rle_masks=filled)


def test_validation_mask_map_equals_faster_coco_eval_segm_with_rle_ground_truth(
    tmp_path: Path,
) -> None:
    json_path = _rle_coco_json(tmp_path)
    coco = read_coco(json_path, tmp_path, task="segment", crowd="ignore")
    ours, predictions = _validate(coco.labels, coco.names, imgsz=96)
    results = _coco_results(predictions)
    segm = _reference_stats(json_path, results, "segm")
    bbox = _reference_stats(json_path, results, "bbox")
    assert 0.2 < ours["mask/mAP50-95"] < 0.9, "the predictions should be neither perfect nor lost"
    assert ours["mask/mAP50-95"] == pytest.approx(segm[0], abs=1e-9)
    assert ours["mask/mAP50"] == pytest.approx(segm[1], abs=1e-9)
    assert ours["box/mAP50-95"] == pytest.approx(bbox[0], abs=1e-6)
    filled, _ = _validate([_holes_filled(x) for x in coco.labels], coco.names, imgsz=96)
    assert filled["mask/mAP50-95"] != pytest.approx(segm[0], abs=1e-3), (
        "scoring against the ring with its hole filled must differ from COCO's score"
    )


def _crowd_segment_data(tmp_path: Path) -> YoloDataModule:
    names = ("a", "b", "c")
    json_path = write_coco(
        _segment_labels(tmp_path / "images", crowd=True),
        tmp_path / "val.json",
        names=names,
        task="segment",
        images_root=tmp_path / "images",
    )
    coco = read_coco(json_path, tmp_path / "images", task="segment", crowd="ignore")
    data = YoloDataModule(
        PreparedDataset({"train": coco.labels, "val": coco.labels}, names, "segment"),
        imgsz=64,
        batch_size=2,
        val_batch_size=2,
        workers=0,
    )
    data.setup("validate")
    return data


def test_evaluator_reset_drops_a_mask_batch_waiting_for_its_sizes(tmp_path: Path) -> None:
    data = _crowd_segment_data(tmp_path)
    first, second = list(data.val_dataloader())[:2]
    evaluator = Evaluator("segment", strides=(8, 16, 32), conf=0.001, max_det=300)
    fresh = Evaluator("segment", strides=(8, 16, 32), conf=0.001, max_det=300)
    evaluator.update(_oracle_outputs(first, 3, seed=2), first)  # scored at the next update
    evaluator.reset()
    for scored in (evaluator, fresh):
        scored.update(_oracle_outputs(second, 3, seed=3), second)
    assert evaluator.compute() == fresh.compute()


def test_evaluator_scores_a_waiting_mask_batch_from_outputs_rewritten_since(
    tmp_path: Path,
) -> None:
    # A replayed evaluation forward hands the evaluator its static outputs, which the next
    # batch's forward rewrites before the waiting mask batch is scored: the evaluator must keep
    # its own copy of what it waits with (float32 prototypes are the outputs' own tensor).
    data = _crowd_segment_data(tmp_path)
    batches = list(data.val_dataloader())
    assert len(batches) >= 2
    borrowed = Evaluator("segment", strides=(8, 16, 32), conf=0.001, max_det=300)
    owned = Evaluator("segment", strides=(8, 16, 32), conf=0.001, max_det=300)
    static: dict[str, Tensor] | None = None
    for seed, batch in enumerate(batches):
        outputs = _oracle_outputs(batch, 3, seed=seed)
        owned.update({k: v.clone() for k, v in outputs.items()}, batch)
        if static is None:
            static = outputs
        else:
            for key, value in outputs.items():
                static[key].copy_(value)
        borrowed.update(static, batch)
    metrics = borrowed.compute()
    assert metrics["mask/mAP50-95"] > 0.2
    assert metrics == owned.compute()


def test_evaluator_builds_the_ground_truth_masks_on_the_first_pass_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds: list[int] = []

    def counted(*args: Any) -> Tensor:
        builds.append(1)
        return source_masks(*args)

    monkeypatch.setattr(source_mask_cache, "source_masks", counted)
    data = _crowd_segment_data(tmp_path)
    batches = list(data.val_dataloader())
    outputs = [_oracle_outputs(batch, 3, seed=2) for batch in batches]
    evaluator = Evaluator("segment", strides=(8, 16, 32), conf=0.001, max_det=300)
    passes = []
    for _ in range(2):
        evaluator.reset()
        for output, batch in zip(outputs, batches, strict=True):
            evaluator.update(output, batch)
        passes.append(evaluator.compute())
    images = sum(len(batch["source_shapes"]) for batch in batches)
    assert len(builds) == images
    assert passes[1] == passes[0]
    assert passes[0]["mask/mAP50-95"] > 0.1


@pytest.mark.parametrize("task", ["detect", "pose"])
def test_evaluator_update_launches_as_many_operations_for_any_batch_size(
    tmp_path: Path, task: str
) -> None:
    # the batch is scored as one padded batch: a loop over its images would launch more
    # kernels per larger batch, and kernel launches bound a GPU validation pass (issue 11)
    yaml = generate_synthetic(tmp_path, task=task, num_train=2, num_val=6, imgsz=64)
    counts = []
    for size in (2, 6):
        data = YoloDataModule(yaml, imgsz=64, batch_size=2, val_batch_size=size, workers=0)
        data.setup("validate")
        batch = next(iter(data.val_dataloader()))
        module = _fresh_module(data, task)
        with torch.no_grad():
            outputs = module.ema_net(batch["images"].float() / 255)
        module.evaluator.update(outputs, batch)  # warm: first calls
        with DispatchedOps() as seen:
            module.evaluator.update(outputs, batch)
        counts.append(sum(seen.ops.values()))
    assert counts[1] == counts[0]


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_evaluator_scoring_replays_through_the_cpu_stand_in_bit_for_bit(
    tmp_path: Path, task: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the replay library's CPU stand-in runs the recording once under its check for
    # operators a CUDA capture rejects (host reads, data-dependent shapes) and replays by
    # running it again: the scoring must pass that check, and its replays' copied outputs
    # must be the eager scoring's, batch after batch
    monkeypatch.setattr(host_shortcuts, "taken", lambda _: False)
    outputs, batch, module = _network_outputs(tmp_path, task)
    evaluator = module.evaluator
    replay = ScoringReplay(evaluator._score, torch.device("cpu"))
    kept = []
    with torch.no_grad():
        for seed in range(4):
            torch.manual_seed(seed)
            noisy = {k: v + torch.randn_like(v) for k, v in outputs.items()}
            inputs = evaluator._scoring_inputs(noisy, batch)
            kept.append((replay(inputs), evaluator._score(inputs)))
    for replayed, eager in kept:
        assert replayed.keys() == eager.keys()
        for name, tensor in eager.items():
            assert torch.equal(replayed[name], tensor), name
    scores = "predictions/scores" if task == "segment" else f"{TASK_KINDS[task][0]}/scores"
    assert not torch.equal(kept[-1][0][scores], kept[-2][0][scores])
    telemetry = replay.telemetry.as_dict()
    # the first call runs eagerly, the second records and replays, the others replay
    assert (telemetry["native_calls"], telemetry["recordings"], telemetry["replays"]) == (1, 1, 3)
    assert telemetry["retirements"] == 0, telemetry


def test_evaluator_scores_masks_through_a_scoring_replay_as_eagerly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a mask batch waits for its sizes with what its scoring returned; through a replay that
    # is copies of the graph's outputs, which the next batch's replay rewrites (the CPU
    # stand-in rewrites them in place as a CUDA graph does): every pass's metrics must be the
    # eager evaluator's, the third replayed throughout
    data = _crowd_segment_data(tmp_path)
    batches = list(data.val_dataloader())
    options: dict[str, Any] = {"strides": (8, 16, 32), "conf": 0.001, "max_det": 300}
    replayed, eager = Evaluator("segment", **options), Evaluator("segment", **options)
    replay = ScoringReplay(replayed._score, torch.device("cpu"))
    monkeypatch.setattr(replayed, "_scoring", lambda device: replay)
    for repeat in range(3):
        for evaluator in (replayed, eager):
            evaluator.reset()
        for seed, batch in enumerate(batches):
            outputs = _oracle_outputs(batch, 3, seed=seed + repeat)
            for evaluator in (replayed, eager):
                evaluator.update(outputs, batch)
        metrics = replayed.compute()
        assert metrics == eager.compute()
    assert metrics["mask/mAP50-95"] > 0.2
    telemetry = replay.telemetry.as_dict()
    assert telemetry["replays"] == 3 * len(batches) - 1, telemetry  # all but the first call


def test_evaluator_replay_scoring_on_the_cpu_scores_eagerly(tmp_path: Path) -> None:
    outputs, batch, module = _network_outputs(tmp_path, "obb")
    options: dict[str, Any] = {"strides": module.net.strides, "conf": 0.001, "max_det": 300}
    replayed = Evaluator("obb", replay_scoring=True, **options)
    eager = Evaluator("obb", **options)
    for evaluator in (replayed, eager):
        evaluator.update(outputs, batch)
    assert replayed.compute() == eager.compute()
    assert set(replayed.scoring_telemetry.as_dict().values()) == {0}


def _fresh_module(data: YoloDataModule, task: str) -> YoloModule:
    """A fresh ``yolo26n`` of the task for the data's classes and keypoints, in eval mode."""
    shape = data.spec.kpt_shape
    return YoloModule(
        f"yolo26n{TASK_SUFFIXES[task]}",
        num_classes=data.num_classes,
        kpt_shape=(17, 3) if shape is None else (shape[0], 3),
    ).eval()


def _network_outputs(tmp_path: Path, task: str) -> tuple[dict[str, Tensor], Batch, YoloModule]:
    """A fresh network's evaluation outputs for a validation batch of 4 synthetic images."""
    yaml = generate_synthetic(tmp_path / task, task=task, num_train=2, num_val=4, imgsz=64)
    data = YoloDataModule(yaml, imgsz=64, batch_size=2, val_batch_size=4, workers=0)
    data.setup("validate")
    batch = next(iter(data.val_dataloader()))
    module = _fresh_module(data, task)
    with torch.no_grad():
        outputs = module.ema_net(batch["images"].float() / 255)
    return outputs, batch, module


def _on_cuda(batch: Batch) -> Batch:
    moved = {k: v.cuda() if isinstance(v, Tensor) else v for k, v in batch.items()}
    return Batch(**moved)  # type: ignore[typeddict-item]


@pytest.mark.gpu
@pytest.mark.parametrize("task", ["detect", "segment"])
def test_evaluator_update_on_cuda_does_not_wait_for_the_device(tmp_path: Path, task: str) -> None:
    data = _crowd_segment_data(tmp_path)
    evaluator = Evaluator(task, strides=(8, 16, 32), conf=0.001, max_det=300)
    reference = Evaluator(task, strides=(8, 16, 32), conf=0.001, max_det=300)
    batches = list(data.val_dataloader())
    outputs = [_oracle_outputs(batch, 3, seed=2) for batch in batches]
    if task == "detect":
        outputs = [{k: o[k] for k in ("o2o.box", "o2o.cls")} for o in outputs]
    on_cuda = [
        ({k: v.cuda() for k, v in output.items()}, _on_cuda(batch))
        for output, batch in zip(outputs, batches, strict=True)
    ]
    evaluator.update(*on_cuda[0])  # warm: first calls, constants copied once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for output, batch in on_cuda[1:]:
                evaluator.update(output, batch)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message) for w in caught if SYNC_WARNING in str(w.message)]
    assert syncs == []
    for output, batch in zip(outputs, batches, strict=True):
        reference.update(output, batch)
    # float32 decoding may differ in the last bit between devices; the metric must agree
    assert evaluator.compute() == pytest.approx(reference.compute(), abs=1e-3)


@pytest.mark.gpu
def test_evaluator_replays_its_matching_with_the_same_metrics_and_no_wait(tmp_path: Path) -> None:
    # three passes: each batch shape's first matching warms up, the next records, then every
    # pass replays; the last pass runs under torch's sync debug mode
    data = _crowd_segment_data(tmp_path)
    batches = list(data.val_dataloader())
    on_cuda = [
        ({k: v.cuda() for k, v in _oracle_outputs(batch, 3, seed=i).items()}, _on_cuda(batch))
        for i, batch in enumerate(batches)
    ]
    options: dict[str, Any] = {"strides": (8, 16, 32), "conf": 0.001, "max_det": 300}
    replayed = Evaluator("segment", replay_scoring=True, **options)
    eager = Evaluator("segment", **options)
    _three_passes(replayed, eager, on_cuda)
    for evaluator in (replayed, eager):
        assert evaluator.compute()["mask/mAP50-95"] > 0.2
    assert replayed.compute() == eager.compute()
    telemetry = replayed.metric.matching_telemetry.as_dict()
    # 2 kinds x len(batches) matchings a pass, 3 passes; at most one native warm-up each
    assert telemetry["replays"] >= 4 * len(batches), telemetry
    assert telemetry["retirements"] == 0, telemetry
    assert eager.metric.matching_telemetry.as_dict()["replays"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_evaluator_replays_its_scoring_with_the_same_metrics_and_no_wait(
    tmp_path: Path, task: str
) -> None:
    # each batch shape's first scoring runs eagerly, its second records, the others replay;
    # the third pass runs under torch's sync debug mode. Detect scores the oracle's outputs
    # (pairs at every threshold, so the metrics would tell), the others a fresh network's
    # in batches of 4 and 2, whose overlaps hardly reach a threshold: the scored tensors
    # themselves are compared, replayed against eager, bit for bit (for masks, what comes
    # before them)
    if task == "detect":
        data = _crowd_segment_data(tmp_path)
        batches = list(data.val_dataloader())
        on_cuda = [
            (
                {k: v.cuda() for k, v in _oracle_outputs(b, 3, seed=i).items() if "o2o" in k},
                _on_cuda(b),
            )
            for i, b in enumerate(batches)
        ]
        strides: tuple[int, ...] = (8, 16, 32)
    else:
        yaml = generate_synthetic(tmp_path / task, task=task, num_train=2, num_val=6, imgsz=64)
        data = YoloDataModule(yaml, imgsz=64, batch_size=2, val_batch_size=4, workers=0)
        data.setup("validate")
        module = _fresh_module(data, task)
        net = module.ema_net.cuda()
        with torch.no_grad():
            on_cuda = [
                (net(b["images"].cuda().float() / 255), _on_cuda(b)) for b in data.val_dataloader()
            ]
        strides = tuple(module.net.strides)
    options: dict[str, Any] = {"strides": strides, "conf": 0.001, "max_det": 300}
    replayed = Evaluator(task, replay_scoring=True, **options)
    eager = Evaluator(task, **options)
    _three_passes(replayed, eager, on_cuda)
    assert replayed.compute() == eager.compute()
    kind = TASK_KINDS[task][0]
    assert replayed.metric.per_class(kind) == eager.metric.per_class(kind)
    if task == "detect":
        assert replayed.compute()["box/mAP50-95"] > 0.2
    with torch.no_grad():
        for output, batch in on_cuda:
            inputs = replayed._scoring_inputs(output, batch)
            scored = replayed._scoring(batch["images"].device)(inputs)
            for name, tensor in eager._score(inputs).items():
                assert torch.equal(scored[name], tensor), name
    telemetry = replayed.scoring_telemetry.as_dict()
    assert telemetry["recordings"] == len({b["images"].shape[0] for _, b in on_cuda})
    assert telemetry["replays"] >= len(on_cuda), telemetry
    assert telemetry["retirements"] == 0, telemetry
    assert set(eager.scoring_telemetry.as_dict().values()) == {0}


def _three_passes(
    replayed: Evaluator, eager: Evaluator, on_cuda: list[tuple[dict[str, Tensor], Batch]]
) -> None:
    """Three validation passes of each evaluator over ``on_cuda``, each ended by ``compute``
    as a validation epoch ends (a pass's last batches are matched there): a batch shape's first
    scoring and matching run eagerly, the second records, later ones replay; the replayed
    evaluator's third pass runs under torch's sync debug mode and must never wait."""
    for evaluator in (replayed, eager):
        for repeat in range(3):
            evaluator.reset()
            debug = evaluator is replayed and repeat == 2
            torch.cuda.synchronize()
            if debug:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    for output, batch in on_cuda:
                        evaluator.update(output, batch)
            finally:
                torch.cuda.set_sync_debug_mode("default")
            if debug:
                assert [w for w in caught if SYNC_WARNING in str(w.message)] == []
            evaluator.compute()


class _BatchSyncs(pl.Callback):
    """Host synchronisations inside validation batches, as torch's debug mode reports them."""

    def __init__(self) -> None:
        self.syncs: list[str] = []
        self.batches = 0
        self._caught: warnings.catch_warnings[list[warnings.WarningMessage]] | None = None
        self._records: list[warnings.WarningMessage] = []

    def on_validation_batch_start(self, *_: Any) -> None:
        self._caught = warnings.catch_warnings(record=True)
        self._records = self._caught.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")

    def on_validation_batch_end(self, *_: Any) -> None:
        torch.cuda.set_sync_debug_mode("default")
        assert self._caught is not None
        self._caught.__exit__(None, None, None)
        self.syncs += [
            f"{w.filename}:{w.lineno}" for w in self._records if SYNC_WARNING in str(w.message)
        ]
        self.batches += 1


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:The 'val_dataloader' does not have many workers")
@pytest.mark.parametrize("replayed", [False, True], ids=["eager", "replayed"])
@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_validation_pass_on_cuda_does_not_wait_for_the_device(
    tmp_path: Path, task: str, replayed: bool
) -> None:
    # replayed: the evaluation forward, the scoring and the metric's matching from CUDA
    # graphs, counted on the third pass (the first warms each signature up, the second records)
    yaml = generate_synthetic(tmp_path / "data", task=task, num_train=2, num_val=6, imgsz=64)
    data = YoloDataModule(yaml, imgsz=64, batch_size=2, val_batch_size=2, workers=0)
    shape = data.spec.kpt_shape
    module = YoloModule(
        f"yolo26n{TASK_SUFFIXES[task]}",
        num_classes=data.num_classes,
        kpt_shape=(17, 3) if shape is None else (shape[0], 3),
        replay=ReplayConfig(evaluation=replayed),
    )
    counter = _BatchSyncs()
    trainer = pl.Trainer(
        accelerator="gpu",
        devices=1,
        precision="bf16-mixed",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
    )
    if replayed:
        # each validate's teardown moves the module to the CPU, and the moved network's
        # evaluation graph is recorded afresh: kept on the device, as a fit keeps it
        module.cpu = lambda: module  # type: ignore[method-assign]
    for _ in range(2 if replayed else 1):  # warm: first calls, constants copied once
        trainer.validate(module, data, verbose=False)
    trainer.callbacks.append(counter)
    trainer.validate(module, data, verbose=False)
    assert counter.batches == 3
    assert counter.syncs == []
    if replayed:  # a fresh network holds no pair within reach: its matching is the eager
        # path with nothing to match (the matching's replay: the evaluator test above)
        recorder = module.replay.evaluation
        assert recorder is not None
        assert recorder.telemetry.replays >= 3
        scoring = module.evaluator.scoring_telemetry
        assert scoring.replays >= 3
        assert scoring.as_dict()["retirements"] == 0
