"""Where the mask gap comes from (issue 13): train segment models, score each many ways.

Each *training variant* trains one YOLO26n-seg from scratch on the synthetic segment set with the
project's defaults except what the variant names; each trained model (its EMA) is then scored
on the held-out images under every *evaluation variant*. Mask mAP50-95 of every pair is printed as
one JSON line per training variant and written to ``--out``.

Training variants (``--train``):

* ``baseline``: the defaults.
* ``opencv-targets``: training masks filled by OpenCV at prototype resolution (the library's
  rule before issue 13) instead of the pixel-centre rule
  (:func:`lucid_yolo.train.geometry.polygon_mask`, the default now); OpenCV's fill sets every
  pixel an edge touches (the targets grow by about half a prototype pixel, 2 input pixels).
* ``pixels-norm``: mask BCE normalised over all cropped pixels instead of per instance area.
* ``samples-64``: 64 instead of 256 mask samples per image.
* ``mask-gain-2x`` / ``mask-gain-half``: the mask loss gain doubled / halved.

Evaluation variants (all on the same predictions of one model):

* ``coco``: the evaluator as it is: ground truth = source polygons at source size; prediction =
  prototype logits sampled at source pixels, thresholded, cropped to the box.
* ``quarter-gt``: ground truth from the quarter-resolution training targets (the evaluator
  before issue 13), predictions as ``coco``.
* ``legacy-pred``: predictions thresholded at input resolution and then resized as binary masks
  (the evaluator before issue 13), ground truth as ``coco``.
* ``legacy``: both of the above, i.e. the evaluator before issue 13.
* ``proto-crop``: logits cropped to the box at prototype resolution, before upsampling.
* ``nearest``: nearest instead of bilinear sampling of the prototype logits.

Overlapping-mask training and prototype resolution are not variants here: the synthetic shapes
never overlap (the generator keeps them apart), and the prototype stride is part of the network.

Examples::

    # CPU, small: overfit 16 images (what the log page reports)
    uv run python tools/mask_experiments.py --overfit --imgsz 128 --images 16 --epochs 40 \\
        --batch 8 --train baseline opencv-targets --out /tmp/mask_experiments.json
    # GPU, the issue's setting
    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 tools/mask_experiments.py \\
        --device cuda --precision bf16-mixed --imgsz 640 --images 512 --val-images 128 \\
        --epochs 30 --batch 16 --workers 8 --train all --out $OUT/mask_experiments.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import cv2
import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
import yaml
from torch import Tensor

import lucid_yolo.train.data.augment.targets as targets_module
from lucid_yolo.models.decode import (
    Detections,
    assemble_masks,
    box_region,
    resample_masks,
)
from lucid_yolo.train import YoloDataModule, YoloModule
from lucid_yolo.train.data.augment.config import AugmentConfig
from lucid_yolo.train.data.augment.sample import Sample
from lucid_yolo.train.data.augment.targets import MASK_STRIDE
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.data.synthetic import generate_synthetic
from lucid_yolo.train.evaluation import Evaluator
from lucid_yolo.train.losses import LossGains, build_loss
from lucid_yolo.train.metrics import ImageTargets, MeanAveragePrecision

TRAIN_VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "opencv-targets": {"opencv_targets": True},
    "pixels-norm": {"mask_normalisation": "pixels"},
    "samples-64": {"mask_samples": 64},
    "mask-gain-2x": {"mask_gain": 2.0},
    "mask-gain-half": {"mask_gain": 0.5},
}
EVAL_VARIANTS = ("coco", "quarter-gt", "legacy-pred", "legacy", "proto-crop", "nearest")


def _opencv_rasterise(sample: Sample, max_instances: int) -> np.ndarray:
    """Training masks filled by OpenCV at prototype resolution (``opencv-targets``): the polygon
    shifted by half a pixel into OpenCV's pixel-centre coordinates, in 1/16-px fixed point."""
    mh, mw = sample.height // MASK_STRIDE, sample.width // MASK_STRIDE
    masks = np.zeros((max_instances, mh, mw), dtype=np.uint8)
    for i, polygon in enumerate(sample.polygons or []):
        if polygon.shape[0] >= 3:
            points = np.round((polygon / MASK_STRIDE - 0.5) * 16).astype(np.int32)
            cv2.fillPoly(masks[i], [points], 1, lineType=cv2.LINE_8, shift=4)
    return masks


@contextmanager
def _training_targets(opencv: bool) -> Iterator[None]:
    """Swap the library's one target rasteriser for the experiment's, and put it back.

    Loader workers are forked inside the ``with`` block and inherit the swap.
    """
    original = targets_module._rasterise
    if opencv:
        targets_module._rasterise = _opencv_rasterise
    try:
        yield
    finally:
        targets_module._rasterise = original


def _legacy_source_masks(masks: Tensor, scale_pad: Tensor, height: int, width: int) -> Tensor:
    """The evaluator's mapping before issue 13: crop whole input pixels, resize binary, 0.5."""
    if masks.shape[0] == 0:
        return torch.zeros((0, height, width), dtype=torch.bool, device=masks.device)
    scale, pad_x, pad_y = (float(v) for v in scale_pad)
    top, left = round(pad_y), round(pad_x)
    bottom = min(masks.shape[-2], top + max(round(height * scale), 1))
    right = min(masks.shape[-1], left + max(round(width * scale), 1))
    cropped = masks[:, top:bottom, left:right].float()
    resized = F.interpolate(cropped[None], size=(height, width), mode="bilinear")
    return resized[0] > 0.5


def _coef_protos(detections: Detections) -> tuple[Tensor, Tensor]:
    if detections.mask_coef is None or detections.protos is None:
        raise ValueError("segment detections carry mask_coef and protos; is the model -seg?")
    return detections.mask_coef, detections.protos


def _nearest_masks(
    detections: Detections, boxes: Tensor, scale_pad: Tensor, height: int, width: int
) -> Tensor:
    """Prototype logits sampled at the nearest prototype pixel, thresholded, box-cropped."""
    coef, protos = _coef_protos(detections)
    M, h, w = protos.shape
    scale, pad_x, pad_y = (float(v) for v in scale_pad)
    device = protos.device
    rows = ((torch.arange(height, device=device) + 0.5) * scale + pad_y) / MASK_STRIDE
    cols = ((torch.arange(width, device=device) + 0.5) * scale + pad_x) / MASK_STRIDE
    rows = rows.floor().long().clamp(0, h - 1)
    cols = cols.floor().long().clamp(0, w - 1)
    logits = (coef @ protos.reshape(M, h * w)).reshape(-1, h, w)
    sampled = logits[:, rows][:, :, cols]
    return (sampled > 0) & box_region(boxes, height, width)


def _proto_crop_masks(detections: Detections, scale_pad: Tensor, height: int, width: int) -> Tensor:
    """Logits cleared outside the box at prototype resolution, then resampled, thresholded."""
    coef, protos = _coef_protos(detections)
    M, h, w = protos.shape
    inside = box_region(detections.boxes, h, w, float(MASK_STRIDE))
    logits = (coef @ protos.reshape(M, h * w)).reshape(-1, h, w)
    cropped = torch.where(inside, logits, torch.full_like(logits, -20.0))
    identity = torch.eye(cropped.shape[0], device=cropped.device)  # one "prototype" per mask
    whole = torch.tensor([[0.0, 0.0, float(width), float(height)]], device=cropped.device)
    scale, pad_x, pad_y = (float(v) for v in scale_pad)
    return resample_masks(
        identity,
        cropped,
        whole.expand(cropped.shape[0], 4),
        (height, width),
        scale=scale,
        pad=(pad_x, pad_y),
    )


def _prediction_masks(
    variant: str, detections: Detections, boxes: Tensor, batch: Batch, i: int
) -> Tensor:
    scale_pad = batch["scale_pad"][i].to(boxes)
    height, width = (int(v) for v in batch["orig_sizes"][i])
    coef, protos = _coef_protos(detections)
    if variant in ("legacy-pred", "legacy"):
        input_size = (int(batch["images"].shape[-2]), int(batch["images"].shape[-1]))
        at_input = assemble_masks(coef, protos, detections.boxes, input_size)
        return _legacy_source_masks(at_input, scale_pad, height, width)
    if variant == "nearest":
        return _nearest_masks(detections, boxes, scale_pad, height, width)
    if variant == "proto-crop":
        return _proto_crop_masks(detections, scale_pad, height, width)
    scale, pad_x, pad_y = (float(v) for v in scale_pad)
    return resample_masks(
        coef,
        protos,
        boxes,
        (height, width),
        scale=scale,
        pad=(pad_x, pad_y),
    )


def _target_masks(variant: str, targets: ImageTargets, batch: Batch, i: int) -> Tensor:
    if variant not in ("quarter-gt", "legacy"):
        assert targets.masks is not None
        return targets.masks
    valid = batch["valid"][i]
    input_size = tuple(batch["images"].shape[-2:])
    height, width = (int(v) for v in batch["orig_sizes"][i])
    upsampled = F.interpolate(
        batch["masks"][i][valid][None].float(), size=input_size, mode="nearest"
    )[0]
    return _legacy_source_masks(upsampled > 0.5, batch["scale_pad"][i], height, width)


@torch.no_grad()
def score_variants(module: YoloModule, data: YoloDataModule) -> dict[str, float]:
    """Mask mAP50-95 of the module's EMA on the validation split, per evaluation variant."""
    evaluator = Evaluator("segment", strides=module.net.strides, conf=0.001, max_det=300)
    metrics = {v: MeanAveragePrecision(kinds=("mask",)) for v in EVAL_VARIANTS}
    net = module.ema_net.eval()
    device = next(net.parameters()).device
    for loaded in data.val_dataloader():
        batch = cast(
            Batch, {k: v.to(device) if isinstance(v, Tensor) else v for k, v in loaded.items()}
        )
        outputs = net(batch["images"].float() / 255.0)
        for i, detections in enumerate(evaluator.decode(outputs, batch)):
            record = evaluator.image_predictions(detections, batch, i)
            if record.boxes is None:
                raise ValueError("a segment evaluator's predictions carry no boxes")
            targets = evaluator.targets(batch, i)
            for variant, metric in metrics.items():
                masks = _prediction_masks(variant, detections, record.boxes, batch, i)
                metric.update(
                    [replace(record, masks=masks)],
                    [replace(targets, masks=_target_masks(variant, targets, batch, i))],
                )
    return {v: round(m.compute()["mask/mAP50-95"], 4) for v, m in metrics.items()}


def train_variant(name: str, args: argparse.Namespace, data_yaml: Path) -> dict[str, Any]:
    """Train one variant and score it; returns its JSON row."""
    options = TRAIN_VARIANTS[name]
    pl.seed_everything(0)
    data = YoloDataModule(
        data_yaml,
        task="segment",
        imgsz=args.imgsz,
        batch_size=args.batch,
        workers=args.workers,
        max_instances=64,
        augment=AugmentConfig.off() if args.overfit else None,
        close_mosaic=0 if args.overfit else min(10, args.epochs // 3),
    )
    module = YoloModule("yolo26n-seg", num_classes=data.num_classes, warmup_epochs=1.0)
    gains = LossGains(mask=LossGains().mask * options.get("mask_gain", 1.0))
    criterion = build_loss(
        "segment",
        data.num_classes,
        strides=module.net.strides,
        gains=gains,
        mask_samples=options.get("mask_samples", 256),
        mask_normalisation=options.get("mask_normalisation", "instance"),
    )
    module.criterion = criterion
    module.replay.criterion = criterion
    trainer = pl.Trainer(
        accelerator="gpu" if args.device == "cuda" else "cpu",
        devices=1,
        precision=args.precision,
        max_epochs=args.epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=args.epochs,
    )
    start = time.perf_counter()
    with _training_targets(options.get("opencv_targets", False)):
        trainer.fit(module, datamodule=data)
        scores = score_variants(module, data)
    logged = {k: float(v) for k, v in trainer.callback_metrics.items() if "mAP50-95" in k}
    return {
        "train": name,
        "seconds": round(time.perf_counter() - start, 1),
        "mask_map50_95": scores,
        "logged": logged,
    }


def main(argv: list[str] | None = None, report: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", nargs="+", default=["baseline"], help="variants or 'all'")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--imgsz", type=int, default=128)
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--val-images", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument(
        "--overfit", action="store_true", help="no augmentation, validate on the train images"
    )
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-mask-experiments"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    names = list(TRAIN_VARIANTS) if args.train == ["all"] else args.train
    unknown = sorted(set(names) - set(TRAIN_VARIANTS))
    if unknown:
        parser.error(f"unknown training variants {unknown!r}; choose from {list(TRAIN_VARIANTS)!r}")
    data_yaml = generate_synthetic(
        args.root / f"segment-{args.imgsz}-{args.images}",
        task="segment",
        num_train=args.images,
        num_val=args.val_images,
        imgsz=args.imgsz,
        seed=0,
    )
    if args.overfit:
        spec = yaml.safe_load(data_yaml.read_text())
        spec["val"] = spec["train"]
        data_yaml.write_text(yaml.safe_dump(spec, sort_keys=False))
    rows = []
    for name in names:
        rows.append(train_variant(name, args, data_yaml))
        report(json.dumps(rows[-1]))
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(
                json.dumps(
                    {
                        "args": vars(args) | {"root": str(args.root), "out": str(args.out)},
                        "rows": rows,
                    },
                    indent=1,
                )
            )


if __name__ == "__main__":
    main()
