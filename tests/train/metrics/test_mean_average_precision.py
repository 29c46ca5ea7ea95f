"""The accumulator: kinds, ignore rules (crowd, difficult, keypoint-less), batching and errors."""

from __future__ import annotations

import contextlib
import functools
import math
import weakref
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import torch
from host_reference import host_box_records, summary

from lucid_yolo.train.metrics import (
    BatchPredictions,
    BatchTargets,
    ImagePredictions,
    ImageTargets,
    MeanAveragePrecision,
    MetricsInputError,
    host_shortcuts,
    mean_average_precision,
    rotated_overlap,
)

BOX_A = [0.0, 0.0, 10.0, 10.0]
BOX_B = [20.0, 20.0, 30.0, 30.0]
BOX_C = [40.0, 0.0, 50.0, 10.0]


def _preds(boxes: list[list[float]], scores: list[float], classes: list[int]) -> ImagePredictions:
    return ImagePredictions(torch.tensor(scores), torch.tensor(classes), boxes=torch.tensor(boxes))


def _rpreds(rboxes: list[list[float]], scores: list[float]) -> ImagePredictions:
    return ImagePredictions(
        torch.tensor(scores),
        torch.zeros(len(scores), dtype=torch.int64),
        rboxes=torch.tensor(rboxes),
    )


def _rtargets(rboxes: list[list[float]], difficult: list[bool]) -> ImageTargets:
    return ImageTargets(
        torch.zeros(len(rboxes), dtype=torch.int64),
        rboxes=torch.tensor(rboxes),
        difficult=torch.tensor(difficult),
    )


def test_mean_average_precision_perfect_boxes_score_one() -> None:
    metric = MeanAveragePrecision()
    metric.update(
        [_preds([BOX_A, BOX_B], [0.9, 0.8], [0, 1])],
        [ImageTargets(torch.tensor([0, 1]), boxes=torch.tensor([BOX_A, BOX_B]))],
    )
    out = metric.compute()
    assert out == {
        "box/mAP50-95": pytest.approx(1.0),
        "box/mAP50": pytest.approx(1.0),
        "box/P": 1.0,
        "box/R": 1.0,
    }


def test_mean_average_precision_wrong_class_is_a_false_positive() -> None:
    metric = MeanAveragePrecision()
    metric.update(
        [_preds([BOX_A], [0.9], [1])],
        [ImageTargets(torch.tensor([0]), boxes=torch.tensor([BOX_A]))],
    )
    assert metric.compute()["box/mAP50"] == 0.0


def test_mean_average_precision_crowd_match_is_neither_tp_nor_fp() -> None:
    targets = ImageTargets(
        torch.tensor([0, 0]),
        boxes=torch.tensor([BOX_A, BOX_B]),
        iscrowd=torch.tensor([False, True]),
    )
    metric = MeanAveragePrecision()
    metric.update([_preds([BOX_B, BOX_B, BOX_A], [0.95, 0.9, 0.5], [0, 0, 0])], [targets])
    assert metric.compute()["box/mAP50-95"] == pytest.approx(1.0)


def test_mean_average_precision_difficult_obb_is_ignored() -> None:
    easy, hard = [5.0, 5.0, 8.0, 4.0, 0.3], [30.0, 30.0, 6.0, 6.0, 1.0]
    with_difficult = MeanAveragePrecision(kinds=("obb",))
    with_difficult.update(
        [_rpreds([hard, easy, hard], [0.95, 0.6, 0.5])], [_rtargets([easy, hard], [False, True])]
    )
    without = MeanAveragePrecision(kinds=("obb",))
    without.update([_rpreds([easy], [0.6])], [_rtargets([easy], [False])])
    assert with_difficult.compute() == without.compute()
    assert without.compute()["obb/mAP50-95"] == pytest.approx(1.0)


def test_mean_average_precision_obb_uses_rotated_overlap() -> None:
    square, turned = [0.0, 0.0, 2.0, 2.0, 0.0], [0.0, 0.0, 2.0, 2.0, math.pi / 4]  # IoU 1/√2
    metric = MeanAveragePrecision(kinds=("obb",))
    metric.update([_rpreds([turned], [0.9])], [_rtargets([square], [False])])
    out = metric.compute()
    assert out["obb/mAP50"] == pytest.approx(1.0)
    assert out["obb/mAP50-95"] == pytest.approx(0.5)  # matched at 0.50 … 0.70, 5 of 10


def test_mean_average_precision_pose_target_without_keypoints_is_ignored() -> None:
    kpts = torch.tensor([[[2.0, 2.0, 2.0], [8.0, 8.0, 2.0]], [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    targets = ImageTargets(torch.tensor([0, 0]), boxes=torch.tensor([BOX_A, BOX_B]), keypoints=kpts)
    preds = ImagePredictions(
        torch.tensor([0.9, 0.8]),
        torch.tensor([0, 0]),
        keypoints=torch.tensor(
            [[[25.0, 25.0, 1.0], [26.0, 26.0, 1.0]], [[2.0, 2.0, 1.0], [8.0, 8.0, 1.0]]]
        ),
    )
    metric = MeanAveragePrecision(kinds=("pose",))
    metric.update([preds], [targets])
    assert metric.compute()["pose/mAP50-95"] == pytest.approx(1.0)


def test_mean_average_precision_max_dets_keeps_the_best_per_class() -> None:
    preds = _preds([BOX_C, BOX_A], [0.9, 0.8], [0, 0])
    targets = ImageTargets(torch.tensor([0]), boxes=torch.tensor([BOX_A]))
    metric = MeanAveragePrecision(max_dets={"box": 1})
    metric.update([preds], [targets])
    assert metric.compute()["box/mAP50"] == 0.0


def test_mean_average_precision_batched_update_equals_one_image_at_a_time() -> None:
    preds = [_preds([BOX_A, BOX_C], [0.9, 0.7], [0, 1]), _preds([BOX_B], [0.8], [1])]
    targets = [
        ImageTargets(torch.tensor([0]), boxes=torch.tensor([BOX_A])),
        ImageTargets(torch.tensor([1, 0]), boxes=torch.tensor([BOX_B, BOX_C])),
    ]
    together, apart = MeanAveragePrecision(), MeanAveragePrecision()
    together.update(preds, targets)
    for p, t in zip(preds, targets, strict=True):
        apart.update([p], [t])
    assert together.compute() == apart.compute()


def test_mean_average_precision_replays_its_matching_only_on_a_cuda_device() -> None:
    # on the CPU the option matches eagerly: the same metrics, no recorder, nothing counted
    preds = [_preds([BOX_A, BOX_C], [0.9, 0.7], [0, 1]), _preds([BOX_B], [0.8], [1])]
    targets = [
        ImageTargets(torch.tensor([0]), boxes=torch.tensor([BOX_A])),
        ImageTargets(torch.tensor([1, 0]), boxes=torch.tensor([BOX_B, BOX_C])),
    ]
    replayed, eager = MeanAveragePrecision(replay_matching=True), MeanAveragePrecision()
    for metric in (replayed, eager):
        metric.update(preds, targets)
    assert replayed.compute() == eager.compute()
    assert replayed.matching_telemetry.as_dict()["recordings"] == 0
    assert replayed.matching_telemetry.as_dict()["native_calls"] == 0


def test_mean_average_precision_reset_forgets() -> None:
    metric = MeanAveragePrecision()
    metric.update(
        [_preds([BOX_A], [0.9], [0])],
        [ImageTargets(torch.tensor([0]), boxes=torch.tensor([BOX_A]))],
    )
    metric.reset()
    assert metric.compute()["box/mAP50-95"] == 0.0


def test_mean_average_precision_several_kinds_report_each() -> None:
    masks = torch.zeros(1, 12, 12, dtype=torch.bool)
    masks[0, :10, :10] = True
    preds = ImagePredictions(
        torch.tensor([0.9]), torch.tensor([0]), boxes=torch.tensor([BOX_A]), masks=masks
    )
    targets = ImageTargets(torch.tensor([0]), boxes=torch.tensor([BOX_A]), masks=masks)
    metric = MeanAveragePrecision(kinds=("box", "mask"))
    metric.update([preds], [targets])
    assert sorted(metric.compute()) == sorted(
        f"{k}/{m}" for k in ("box", "mask") for m in ("mAP50-95", "mAP50", "P", "R")
    )


def test_mean_average_precision_rejects_unknown_kind() -> None:
    with pytest.raises(MetricsInputError, match=r"kinds must be .* got \('boxes',\)"):
        MeanAveragePrecision(kinds=("boxes",))


def test_mean_average_precision_rejects_non_positive_max_dets() -> None:
    with pytest.raises(MetricsInputError, match="max_dets must be positive"):
        MeanAveragePrecision(max_dets={"box": 0})


def test_mean_average_precision_rejects_length_mismatch() -> None:
    with pytest.raises(MetricsInputError, match=r"differ in number \(one ran out after 0 images\)"):
        MeanAveragePrecision().update([_preds([BOX_A], [0.9], [0])], [])


def test_mean_average_precision_names_the_missing_field() -> None:
    preds = ImagePredictions(torch.tensor([0.9]), torch.tensor([0]), boxes=torch.tensor([BOX_A]))
    targets = ImageTargets(torch.tensor([0]), boxes=torch.tensor([BOX_A]))
    with pytest.raises(
        MetricsInputError, match=r"'mask' reads ImagePredictions.masks, which is None"
    ):
        MeanAveragePrecision(kinds=("mask",)).update([preds], [targets])


def test_mean_average_precision_rejects_wrongly_shaped_boxes() -> None:
    preds = ImagePredictions(torch.tensor([0.9]), torch.tensor([0]), boxes=torch.zeros(1, 5))
    targets = ImageTargets(torch.tensor([0]), boxes=torch.tensor([BOX_A]))
    with pytest.raises(MetricsInputError, match=r"ImagePredictions.boxes has shape \(1, 5\)"):
        MeanAveragePrecision().update([preds], [targets])


def test_mean_average_precision_rejects_negative_class_ids() -> None:
    targets = ImageTargets(torch.tensor([-1]), boxes=torch.tensor([BOX_A]))
    with pytest.raises(MetricsInputError, match="targets hold class id -1"):
        MeanAveragePrecision().update([_preds([BOX_A], [0.9], [0])], [targets])


def test_mean_average_precision_rejects_mismatched_mask_sizes() -> None:
    preds = ImagePredictions(
        torch.tensor([0.9]), torch.tensor([0]), masks=torch.zeros(1, 4, 4, dtype=torch.bool)
    )
    targets = ImageTargets(torch.tensor([0]), masks=torch.zeros(1, 4, 5, dtype=torch.bool))
    with pytest.raises(
        MetricsInputError, match=r"prediction masks are \(4, 4\) but target masks are \(4, 5\)"
    ):
        MeanAveragePrecision(kinds=("mask",)).update([preds], [targets])


def test_mean_average_precision_rejects_wrong_sigma_count() -> None:
    kpts = torch.zeros(1, 3, 3)
    preds = ImagePredictions(torch.tensor([0.9]), torch.tensor([0]), keypoints=kpts)
    targets = ImageTargets(torch.tensor([0]), boxes=torch.tensor([BOX_A]), keypoints=kpts)
    with pytest.raises(MetricsInputError, match="got 2 OKS sigmas for 3 keypoints"):
        MeanAveragePrecision(kinds=("pose",), sigmas=[0.1, 0.1]).update([preds], [targets])


def test_mean_average_precision_rejects_wrongly_shaped_flags() -> None:
    targets = ImageTargets(
        torch.tensor([0]), boxes=torch.tensor([BOX_A]), iscrowd=torch.tensor([True, False])
    )
    with pytest.raises(MetricsInputError, match=r"target flags have shape \(2,\), expected \(1,\)"):
        MeanAveragePrecision().update([_preds([BOX_A], [0.9], [0])], [targets])


def _records_on(kind: str, device: str) -> tuple[list[ImagePredictions], list[ImageTargets]]:
    """One seeded image of ``kind`` with 40 targets and 60 noisy predictions, on ``device``."""
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(40, 2, generator=g) * 80
    t_boxes = torch.cat([xy, xy + 5 + torch.rand(40, 2, generator=g) * 30], 1)
    p_boxes = torch.cat([t_boxes + torch.randn(40, 4, generator=g), t_boxes[:20] + 6])
    t_classes = torch.randint(0, 3, (40,), generator=g)
    p_classes = torch.cat([t_classes, t_classes[:20]])
    scores = torch.rand(60, generator=g)

    def geometry(boxes: torch.Tensor) -> dict[str, torch.Tensor]:
        if kind == "box":
            return {"boxes": boxes}
        if kind == "mask":
            yy, xx = torch.arange(128)[:, None], torch.arange(128)[None, :]
            x0, y0, x1, y1 = (boxes[:, i, None, None] for i in range(4))
            return {"masks": (xx >= x0) & (xx < x1) & (yy >= y0) & (yy < y1)}
        if kind == "pose":
            corners = torch.stack(
                [boxes[:, :2], boxes[:, 2:], (boxes[:, :2] + boxes[:, 2:]) / 2], 1
            )
            return {
                "boxes": boxes,
                "keypoints": torch.cat([corners, torch.ones(len(boxes), 3, 1)], 2),
            }
        centre, size = (boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]
        return {"rboxes": torch.cat([centre, size, centre[:, :1] / 100], 1)}

    pred = ImagePredictions(scores, p_classes, **geometry(p_boxes))
    target = ImageTargets(t_classes, **geometry(t_boxes))
    moved_pred = ImagePredictions(
        **{k: None if v is None else v.to(device) for k, v in vars(pred).items()}
    )
    moved_target = ImageTargets(
        **{k: None if v is None else v.to(device) for k, v in vars(target).items()}
    )
    return [moved_pred], [moved_target]


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["box", "mask", "pose", "obb"])
def test_mean_average_precision_cuda_inputs_equal_cpu_inputs(kind: str) -> None:
    results = []
    for device in ("cpu", "cuda"):
        metric = MeanAveragePrecision(kinds=(kind,))
        metric.update(*_records_on(kind, device))
        results.append(metric.compute())
    assert 0.1 < results[0][f"{kind}/mAP50-95"] < 1.0
    assert results[0] == results[1]


@pytest.mark.parametrize("kind", ["mask", "obb"])
def test_mean_average_precision_every_pair_equals_the_cpu_cut(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the CPU computes overlaps only where a pair is possible, other devices every pair; a
    # fifth of the targets are crowds, whose overlap divides by the prediction's area
    def records() -> tuple[list[ImagePredictions], list[ImageTargets]]:
        preds, (target,) = _records_on(kind, "cpu")
        return preds, [replace(target, iscrowd=torch.arange(len(target)) % 5 == 0)]

    expected = MeanAveragePrecision(kinds=(kind,))
    expected.update(*records())
    monkeypatch.setattr(host_shortcuts, "taken", lambda _: False)
    every_pair = MeanAveragePrecision(kinds=(kind,))
    every_pair.update(*records())
    assert 0.1 < expected.compute()[f"{kind}/mAP50-95"] < 1.0
    assert every_pair.compute() == expected.compute()


def test_mean_average_precision_every_pair_of_padded_images_equals_the_cpu_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    preds, targets, ids = _padded_scene(5)
    expected = MeanAveragePrecision(max_dets={"box": 6})
    expected.update(preds, targets, image_ids=ids)
    monkeypatch.setattr(host_shortcuts, "taken", lambda _: False)
    every_pair = MeanAveragePrecision(max_dets={"box": 6})
    every_pair.update(preds, targets, image_ids=ids)
    assert 0.05 < expected.compute()["box/mAP50-95"] < 0.95
    assert every_pair.compute() == expected.compute()


def _two_images(kind: str) -> tuple[list[ImagePredictions], list[ImageTargets]]:
    """``_records_on``'s image and a smaller one cut from it: a batch of unequal images."""
    (pred,), (target,) = _records_on(kind, "cpu")
    rows, cols = torch.arange(0, 60, 2), torch.arange(0, 40, 3)

    def cut(record: Any, index: torch.Tensor) -> dict[str, Any]:
        return {k: None if v is None else v[index] for k, v in vars(record).items()}

    return [pred, ImagePredictions(**cut(pred, rows))], [target, ImageTargets(**cut(target, cols))]


@pytest.mark.parametrize("kind", ["box", "mask", "pose", "obb"])
def test_mean_average_precision_batch_of_unequal_images_equals_one_at_a_time(kind: str) -> None:
    preds, targets = _two_images(kind)
    together, apart = MeanAveragePrecision(kinds=(kind,)), MeanAveragePrecision(kinds=(kind,))
    together.update(preds, targets)
    for p, t in zip(preds, targets, strict=True):
        apart.update([p], [t])
    assert 0.1 < apart.compute()[f"{kind}/mAP50-95"] < 1.0
    assert together.compute() == apart.compute()


@pytest.mark.parametrize("kind", ["box", "mask", "pose", "obb"])
def test_mean_average_precision_padding_kept_equals_the_cpu_cut(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the CPU drops the padding rows and computes overlaps only where a pair is possible;
    # other devices keep every row and pair, which must change nothing
    preds, targets = _two_images(kind)
    expected = MeanAveragePrecision(kinds=(kind,))
    expected.update(preds, targets)
    monkeypatch.setattr(host_shortcuts, "taken", lambda _: False)
    every_row = MeanAveragePrecision(kinds=(kind,))
    every_row.update(preds, targets)
    assert every_row.compute() == expected.compute()


def _masks_of(
    records: list[Any],
    name: str,
    asked: list[str],
    rows: Callable[[int], torch.Tensor] | None = None,
) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    """An ``ImageMasks`` over ``records`` that notes each call; ``rows(i)``: the rows it builds."""

    def image(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        asked.append(f"{name}{i}")
        mask = records[i].masks
        assert mask is not None
        built = torch.arange(mask.shape[0]) if rows is None else rows(i)
        return mask[built], built

    return image


def test_mean_average_precision_update_batch_builds_each_image_masks_once() -> None:
    preds, targets = _two_images("mask")
    asked: list[str] = []
    batch_preds = replace(BatchPredictions.from_images(preds), masks=_masks_of(preds, "p", asked))
    batch_targets = replace(BatchTargets.from_images(targets), masks=_masks_of(targets, "t", asked))
    metric, reference = MeanAveragePrecision(kinds=("mask",)), MeanAveragePrecision(kinds=("mask",))
    metric.update_batch(batch_preds, batch_targets)
    reference.update(preds, targets)
    assert sorted(asked) == ["p0", "p1", "t0", "t1"]
    assert metric.compute() == reference.compute()


def test_mean_average_precision_holds_one_image_masks_at_a_time() -> None:
    # a mask batch's images at source size are the largest tensors of a validation pass: the
    # masks of image 0 must be gone by the time image 1's are built
    preds, targets = _two_images("mask")
    built: list[weakref.ref[torch.Tensor]] = []
    alive_when_asked: list[int] = []

    def masks_of(records: list[Any]) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
        def image(i: int) -> tuple[torch.Tensor, torch.Tensor]:
            alive_when_asked.append(sum(ref() is not None for ref in built))
            mask = records[i].masks
            assert mask is not None
            fresh = mask.clone()  # a new tensor, as a producer's masks are
            built.append(weakref.ref(fresh))
            return fresh, torch.arange(mask.shape[0])

        return image

    metric = MeanAveragePrecision(kinds=("mask",))
    metric.update_batch(
        replace(BatchPredictions.from_images(preds), masks=masks_of(preds)),
        replace(BatchTargets.from_images(targets), masks=masks_of(targets)),
    )
    # image 0: predictions, then targets (the predictions alive); image 1: the same again
    assert alive_when_asked == [0, 1, 0, 1]


def test_mean_average_precision_builds_a_batch_masks_inside_its_scratch() -> None:
    preds, targets = _two_images("mask")
    events: list[str] = []

    @contextlib.contextmanager
    def scratch() -> Iterator[None]:
        events.append("enter")
        yield
        events.append("exit")

    metric = MeanAveragePrecision(kinds=("mask",), mask_scratch=scratch)
    reference = MeanAveragePrecision(kinds=("mask",))
    metric.update_batch(
        replace(BatchPredictions.from_images(preds), masks=_masks_of(preds, "p", events)),
        replace(BatchTargets.from_images(targets), masks=_masks_of(targets, "t", events)),
    )
    reference.update(preds, targets)
    assert events == ["enter", "p0", "t0", "p1", "t1", "exit"]  # one scratch a batch
    assert metric.compute() == reference.compute()


def test_mean_average_precision_masks_of_rows_that_cannot_pair_may_be_left_out() -> None:
    preds, targets = _two_images("mask")
    absent = torch.where(torch.arange(len(preds[1])) % 3 == 0, 7, preds[1].classes)
    preds[1] = replace(preds[1], classes=absent)  # a third of image 1's rows: no such target
    target_classes = [set(t.classes.tolist()) for t in targets]

    def can_pair(i: int) -> torch.Tensor:  # a class some target of the image has
        present = [c in target_classes[i] for c in preds[i].classes.tolist()]
        return torch.nonzero(torch.tensor(present)).squeeze(1)

    asked: list[str] = []
    some_rows = replace(
        BatchPredictions.from_images(preds), masks=_masks_of(preds, "p", asked, can_pair)
    )
    metric, reference = MeanAveragePrecision(kinds=("mask",)), MeanAveragePrecision(kinds=("mask",))
    metric.update_batch(some_rows, BatchTargets.from_images(targets))
    reference.update(preds, targets)
    assert len(can_pair(1)) < len(preds[1]), "a test of nothing: every row can pair"
    assert metric.compute() == reference.compute()


def test_mean_average_precision_update_batch_rejects_another_number_of_targets() -> None:
    preds = BatchPredictions.from_images([_preds([BOX_A], [0.9], [0])] * 2)
    targets = BatchTargets.from_images(
        [ImageTargets(torch.tensor([0]), boxes=torch.tensor([BOX_A]))]
    )
    with pytest.raises(MetricsInputError, match="got 2 images of predictions and 1 of targets"):
        MeanAveragePrecision().update_batch(preds, targets)


def _rotated_scene(seed: int) -> tuple[list[ImagePredictions], list[ImageTargets]]:
    """Axis-aligned ``xywhr`` images: targets, and noisy predictions of them with random scores."""
    g = torch.Generator().manual_seed(seed)
    preds, targets = [], []
    for _ in range(6):
        centre = torch.rand(5, 2, generator=g, dtype=torch.float64) * 200
        size = 10 + torch.rand(5, 2, generator=g, dtype=torch.float64) * 30
        rboxes = torch.cat([centre, size, torch.zeros(5, 1, dtype=torch.float64)], 1)
        noise = torch.randn(5, 4, generator=g, dtype=torch.float64) * 3
        noisy = rboxes + torch.cat([noise, torch.zeros(5, 1, dtype=torch.float64)], 1)
        classes = torch.randint(0, 2, (5,), generator=g)
        scores = torch.rand(5, generator=g)
        preds.append(ImagePredictions(scores, classes, rboxes=noisy))
        targets.append(ImageTargets(classes, rboxes=rboxes))
    return preds, targets


def _xyxy(rboxes: torch.Tensor) -> torch.Tensor:
    return torch.cat([rboxes[:, :2] - rboxes[:, 2:4] / 2, rboxes[:, :2] + rboxes[:, 2:4] / 2], 1)


def _turned(rboxes: torch.Tensor, angle: float) -> torch.Tensor:
    c, s = math.cos(angle), math.sin(angle)
    x, y = rboxes[:, 0], rboxes[:, 1]
    return torch.stack(
        [c * x - s * y, s * x + c * y, rboxes[:, 2], rboxes[:, 3], rboxes[:, 4] + angle], 1
    )


def test_mean_average_precision_obb_at_angle_zero_equals_box() -> None:
    preds, targets = _rotated_scene(0)
    obb, box = MeanAveragePrecision(kinds=("obb",)), MeanAveragePrecision(kinds=("box",))
    obb.update(preds, targets)
    box.update(
        [
            ImagePredictions(p.scores, p.classes, boxes=_xyxy(p.rboxes))
            for p in preds
            if p.rboxes is not None
        ],
        [ImageTargets(t.classes, boxes=_xyxy(t.rboxes)) for t in targets if t.rboxes is not None],
    )
    obb_out, box_out = obb.compute(), box.compute()
    assert 0.2 < box_out["box/mAP50-95"] < 0.95
    for name in ("mAP50-95", "mAP50", "P", "R"):
        assert obb_out[f"obb/{name}"] == pytest.approx(box_out[f"box/{name}"], abs=1e-9)


def test_mean_average_precision_obb_is_invariant_to_turning_the_scene() -> None:
    preds, targets = _rotated_scene(1)
    straight, turned = MeanAveragePrecision(kinds=("obb",)), MeanAveragePrecision(kinds=("obb",))
    straight.update(preds, targets)
    turned.update(
        [
            ImagePredictions(p.scores, p.classes, rboxes=_turned(p.rboxes, 0.6))
            for p in preds
            if p.rboxes is not None
        ],
        [
            ImageTargets(t.classes, rboxes=_turned(t.rboxes, 0.6))
            for t in targets
            if t.rboxes is not None
        ],
    )
    for name, value in straight.compute().items():
        assert turned.compute()[name] == pytest.approx(value, abs=1e-9)


def test_mean_average_precision_merge_equals_one_accumulator_over_both() -> None:
    preds, targets = _rotated_scene(2)
    first, second, whole = (MeanAveragePrecision(kinds=("obb",)) for _ in range(3))
    first.update(preds[:3], targets[:3])
    second.update(preds[3:], targets[3:])
    whole.update(preds, targets)
    first.merge(second)
    assert first.compute() == whole.compute()


def test_mean_average_precision_merge_rejects_other_settings() -> None:
    with pytest.raises(MetricsInputError, match="cannot merge an accumulator of kinds"):
        MeanAveragePrecision(kinds=("box",)).merge(MeanAveragePrecision(kinds=("mask",)))


def test_mean_average_precision_per_class_reports_classes_with_targets() -> None:
    metric = MeanAveragePrecision()
    metric.update(
        [_preds([BOX_A, BOX_C], [0.9, 0.8], [0, 2])],
        [ImageTargets(torch.tensor([0, 1]), boxes=torch.tensor([BOX_A, BOX_B]))],
    )
    per_class = metric.per_class("box")
    assert sorted(per_class) == [0, 1]
    assert per_class[0] == (pytest.approx(1.0), pytest.approx(1.0))
    assert per_class[1] == (0.0, 0.0)


def test_mean_average_precision_per_class_rejects_other_kinds() -> None:
    with pytest.raises(MetricsInputError, match="kind 'mask' is not evaluated here"):
        MeanAveragePrecision().per_class("mask")


def test_mean_average_precision_accepts_float_class_ids() -> None:
    metric = MeanAveragePrecision()
    metric.update(
        [ImagePredictions(torch.tensor([0.9]), torch.tensor([0.0]), boxes=torch.tensor([BOX_A]))],
        [ImageTargets(torch.tensor([0.0]), boxes=torch.tensor([BOX_A]))],
    )
    assert metric.compute()["box/mAP50"] == pytest.approx(1.0)


def test_mean_average_precision_rejects_mismatched_keypoint_counts() -> None:
    preds = ImagePredictions(torch.tensor([0.9]), torch.tensor([0]), keypoints=torch.zeros(1, 4, 3))
    targets = ImageTargets(
        torch.tensor([0]), boxes=torch.tensor([BOX_A]), keypoints=torch.zeros(1, 5, 3)
    )
    with pytest.raises(
        MetricsInputError,
        match=r"prediction keypoints are \(1, 4, 3\) and target keypoints \(1, 5, 3\)",
    ):
        MeanAveragePrecision(kinds=("pose",)).update([preds], [targets])


def _tied_images() -> tuple[list[ImagePredictions], list[ImageTargets]]:
    """Image 0 holds a hit and image 1 a miss at the same score: their order sets the AP."""
    targets = [ImageTargets(torch.tensor([0]), boxes=torch.tensor([BOX_A])) for _ in range(2)]
    return [_preds([BOX_A], [0.5], [0]), _preds([BOX_B], [0.5], [0])], targets


def test_mean_average_precision_image_ids_score_in_id_order() -> None:
    preds, targets = _tied_images()
    in_order, reversed_with_ids, reversed_without = (MeanAveragePrecision() for _ in range(3))
    in_order.update(preds, targets)
    reversed_with_ids.update(preds[::-1], targets[::-1], image_ids=[1, 0])
    reversed_without.update(preds[::-1], targets[::-1])
    assert reversed_with_ids.compute() == in_order.compute()
    assert reversed_without.compute() != in_order.compute()


def test_mean_average_precision_repeated_image_id_counts_once() -> None:
    preds, targets = _tied_images()
    once, repeated = MeanAveragePrecision(), MeanAveragePrecision()
    once.update(preds, targets, image_ids=[0, 1])
    repeated.update(preds, targets, image_ids=[0, 1])
    repeated.update(preds[:1], targets[:1], image_ids=[0])
    assert repeated.compute() == once.compute()
    assert repeated.per_class("box") == once.per_class("box")


def test_mean_average_precision_rejects_ids_on_some_updates_only() -> None:
    preds, targets = _tied_images()
    metric = MeanAveragePrecision()
    metric.update(preds[:1], targets[:1], image_ids=[0])
    metric.update(preds[1:], targets[1:])
    with pytest.raises(MetricsInputError, match="1 of 2 images were updated without an image id"):
        metric.compute()


def test_mean_average_precision_rejects_image_ids_of_another_length() -> None:
    preds, targets = _tied_images()
    with pytest.raises(MetricsInputError, match="got 2 images and 1 image ids"):
        MeanAveragePrecision().update(preds, targets, image_ids=[0])


def test_mean_average_precision_obb_clipping_every_pair_equals_the_candidates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    preds, targets = _rotated_scene(2)
    turned_preds = [
        ImagePredictions(p.scores, p.classes, rboxes=_turned(p.rboxes, 0.6))
        for p in preds
        if p.rboxes is not None
    ]
    turned_targets = [
        ImageTargets(t.classes, rboxes=_turned(t.rboxes, 0.6))
        for t in targets
        if t.rboxes is not None
    ]
    candidates = MeanAveragePrecision(kinds=("obb",))
    candidates.update(turned_preds, turned_targets)
    expected = candidates.compute()
    every_pair = functools.partial(rotated_overlap.rotated_overlaps, compact=False)
    monkeypatch.setattr(mean_average_precision, "rotated_overlaps", every_pair)
    metric = MeanAveragePrecision(kinds=("obb",))
    metric.update(turned_preds, turned_targets)
    assert 0.2 < expected["obb/mAP50-95"] < 0.95
    assert metric.compute() == expected


def _padded_scene(seed: int) -> tuple[list[ImagePredictions], list[ImageTargets], list[int]]:
    """Static-shape records as the evaluator gives them: 24 images, 40 prediction rows each of
    which some are padding (class -1), 10 target rows with padding and crowds; scores drawn from
    few values so ties are common; ids shuffled with two repeats."""
    g = torch.Generator().manual_seed(seed)
    preds, targets = [], []
    for _ in range(24):
        m = int(torch.randint(0, 9, (), generator=g))
        t_valid = torch.arange(10) < m
        xy = torch.rand(10, 2, generator=g, dtype=torch.float64) * 80
        t_boxes = torch.cat([xy, xy + 4 + torch.rand(10, 2, generator=g) * 30], 1)
        t_classes = torch.where(t_valid, torch.randint(0, 4, (10,), generator=g), -1)
        crowd = t_valid & (torch.rand(10, generator=g) < 0.15)
        source = torch.randint(0, 10, (40,), generator=g)
        p_boxes = t_boxes[source] + torch.randn(40, 4, generator=g, dtype=torch.float64) * 1.5
        p_valid = torch.rand(40, generator=g) < 0.7
        p_classes = torch.where(
            torch.rand(40, generator=g) < 0.8,
            t_classes[source].clamp(min=0),
            torch.randint(0, 4, (40,), generator=g),
        )
        scores = torch.randint(1, 10, (40,), generator=g).to(torch.float32) / 10
        preds.append(
            ImagePredictions(
                scores, torch.where(p_valid, p_classes, -1), boxes=p_boxes, valid=p_valid
            )
        )
        targets.append(ImageTargets(t_classes, boxes=t_boxes, iscrowd=crowd, valid=t_valid))
    ids = torch.randperm(24, generator=g).tolist()
    ids[5], ids[17] = ids[3], ids[11]
    return preds, targets, ids


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mean_average_precision_equals_the_previous_host_path_bitwise(seed: int) -> None:
    preds, targets, ids = _padded_scene(seed)
    metric = MeanAveragePrecision(max_dets={"box": 6})
    for start in range(0, 24, 5):
        end = start + 5
        metric.update(preds[start:end], targets[start:end], image_ids=torch.tensor(ids[start:end]))
    expected = summary(host_box_records(preds, targets, max_dets=6, image_ids=ids))
    assert 0.05 < expected["box/mAP50-95"] < 0.95
    assert metric.compute() == expected


def test_mean_average_precision_padding_rows_change_nothing() -> None:
    preds, targets, _ = _padded_scene(3)
    padded, cut = MeanAveragePrecision(), MeanAveragePrecision()
    padded.update(preds, targets)
    real_preds, real_targets = [], []
    for p, t in zip(preds, targets, strict=True):
        assert p.boxes is not None
        assert t.boxes is not None
        keep, real = p.valid_flags(), t.valid_flags()
        real_preds.append(ImagePredictions(p.scores[keep], p.classes[keep], boxes=p.boxes[keep]))
        real_targets.append(
            ImageTargets(t.classes[real], boxes=t.boxes[real], iscrowd=t.crowd_flags()[real])
        )
    cut.update(real_preds, real_targets)
    assert padded.compute() == cut.compute()


def _on_device(
    preds: list[ImagePredictions], targets: list[ImageTargets], device: str
) -> tuple[list[ImagePredictions], list[ImageTargets]]:
    """The same images with every tensor field on ``device``."""

    def moved(record: Any) -> dict[str, Any]:
        return {k: None if v is None else v.to(device) for k, v in vars(record).items()}

    return [ImagePredictions(**moved(p)) for p in preds], [
        ImageTargets(**moved(t)) for t in targets
    ]


@pytest.mark.gpu
def test_mean_average_precision_cuda_records_equal_the_previous_host_path() -> None:
    preds, targets, ids = _padded_scene(4)
    moved, moved_targets = _on_device(preds, targets, "cuda")
    metric = MeanAveragePrecision(max_dets={"box": 6})
    metric.update(moved, moved_targets, image_ids=torch.tensor(ids).cuda())
    assert metric.compute() == summary(host_box_records(preds, targets, max_dets=6, image_ids=ids))


@pytest.mark.gpu
def test_mean_average_precision_update_does_not_wait_for_the_device() -> None:
    preds, targets, ids = _padded_scene(5)
    moved, moved_targets = _on_device(preds, targets, "cuda")
    metric = MeanAveragePrecision()
    first_ids, other_ids = torch.tensor(ids[:2]).cuda(), torch.tensor(ids[2:]).cuda()
    metric.update(moved[:2], moved_targets[:2], image_ids=first_ids)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        metric.update(moved[2:], moved_targets[2:], image_ids=other_ids)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert metric.compute()["box/mAP50"] > 0.0


@pytest.mark.gpu
def test_mean_average_precision_obb_update_does_not_wait_for_the_device() -> None:
    preds, targets = _rotated_scene(3)
    moved, moved_targets = _on_device(preds, targets, "cuda")
    metric, reference = MeanAveragePrecision(kinds=("obb",)), MeanAveragePrecision(kinds=("obb",))
    metric.update(moved[:2], moved_targets[:2])
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        metric.update(moved[2:], moved_targets[2:])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    reference.update(preds, targets)
    assert metric.compute() == reference.compute()


@pytest.mark.gpu
def test_mean_average_precision_reports_a_negative_cuda_class_id_on_compute() -> None:
    targets = ImageTargets(torch.tensor([-1]).cuda(), boxes=torch.tensor([BOX_A]).cuda())
    preds = ImagePredictions(
        torch.tensor([0.9]).cuda(), torch.tensor([0]).cuda(), boxes=torch.tensor([BOX_A]).cuda()
    )
    metric = MeanAveragePrecision()
    metric.update([preds], [targets])
    with pytest.raises(MetricsInputError, match="targets hold class id -1"):
        metric.compute()


def test_mean_average_precision_scores_without_keeping_and_adds_what_it_scored() -> None:
    # score_batch is the part a CUDA graph replays: it must leave the accumulator as it was;
    # add_scored then keeps the batch as update_batch would
    preds, targets, ids = _padded_scene(7)
    batch_preds = BatchPredictions.from_images(preds)
    batch_targets = BatchTargets.from_images(targets)
    updated, scored = MeanAveragePrecision(), MeanAveragePrecision()
    updated.update_batch(batch_preds, batch_targets, image_ids=ids)
    batch = scored.score_batch(batch_preds, batch_targets)
    assert scored.compute()["box/mAP50-95"] == 0.0  # nothing kept yet
    assert list(batch.kinds) == ["box"]
    assert batch.lowest_classes.tolist() == [0, 0]
    scored.add_scored(batch, ids)
    assert 0.05 < scored.compute()["box/mAP50-95"] < 0.95
    assert scored.compute() == updated.compute()


def test_mean_average_precision_add_scored_rejects_another_metric_s_batch() -> None:
    preds, targets, ids = _padded_scene(8)
    batch_preds = BatchPredictions.from_images(preds)
    batch_targets = BatchTargets.from_images(targets)
    box = MeanAveragePrecision().score_batch(batch_preds, batch_targets)
    with pytest.raises(MetricsInputError, match="scored for kinds \\('box',\\)"):
        MeanAveragePrecision(kinds=("obb",)).add_scored(box)
    with pytest.raises(MetricsInputError, match="24 images and 3 image ids"):
        MeanAveragePrecision().add_scored(box, ids[:3])


def test_mean_average_precision_add_scored_raises_on_a_negative_class_on_the_cpu() -> None:
    preds, targets, _ = _padded_scene(9)
    bad = [replace(targets[0], classes=torch.full_like(targets[0].classes, -2)), *targets[1:]]
    metric = MeanAveragePrecision()
    batch = metric.score_batch(
        BatchPredictions.from_images(preds),
        BatchTargets.from_images(bad),  # no valid flags: every row is real
    )
    with pytest.raises(MetricsInputError, match="targets hold class id -2"):
        metric.add_scored(batch)
