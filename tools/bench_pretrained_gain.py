"""What starting from pretrained weights gains: fine-tune against from scratch, same epochs.

Trains a network on one synthetic set (the "pretraining" set, its own seed), writes its EMA
weights as a user would bring them (a state dict under Ultralytics' names,
:func:`lucid_yolo.models.save_reference_weights`), then fits a second synthetic set (another seed,
so other images) twice for the same epochs: once from those weights (``weights=``, the path of
``--model.weights``) and once from scratch. Prints validation mAP50-95 after every epoch of both
runs and writes them to ``$OUT/pretrained_gain.json`` when ``$OUT`` is set.

Example (GPU machine, from source)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 tools/bench_pretrained_gain.py \\
        --task detect --pretrain-epochs 30 --epochs 10 --images 512 --imgsz 640

A quick CPU run (minutes, small numbers)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 tools/bench_pretrained_gain.py \\
        --accelerator cpu --pretrain-epochs 3 --epochs 2 --images 32 --imgsz 128 --batch 8
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from lucid_yolo.models import save_reference_weights
from lucid_yolo.train import YoloDataModule, YoloModule
from lucid_yolo.train.data.synthetic import generate_synthetic

SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}
FITNESS = "val/fitness"


class _Fitness(Callback):
    def __init__(self) -> None:
        self.per_epoch: list[float] = []

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self.per_epoch.append(round(float(trainer.callback_metrics[FITNESS]), 4))


def _fit(
    args: argparse.Namespace, data_yaml: Path, epochs: int, weights: Path | None
) -> tuple[YoloModule, list[float]]:
    pl.seed_everything(0)
    data = YoloDataModule(
        data_yaml, task=args.task, imgsz=args.imgsz, batch_size=args.batch, workers=args.workers
    )
    module = YoloModule(
        f"yolo26{args.scale}{SUFFIX[args.task]}",
        num_classes=data.num_classes,
        weights=None if weights is None else str(weights),
        warmup_min_steps=args.warmup_min_steps,
    )
    fitness = _Fitness()
    trainer = pl.Trainer(
        accelerator=args.accelerator,
        devices=1,
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[fitness],
    )
    trainer.fit(module, data)
    return module, fitness.per_epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="detect", choices=list(SUFFIX))
    parser.add_argument("--scale", default="n")
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--pretrain-epochs", type=int, default=30)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--images", type=int, default=512, help="train images per set")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--warmup-min-steps", type=int, default=100)
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-pretrained-gain"))
    args = parser.parse_args()

    def synthetic(name: str, seed: int) -> Path:
        return generate_synthetic(
            args.root / name,
            task=args.task,
            num_train=args.images,
            num_val=max(args.images // 4, 8),
            imgsz=args.imgsz,
            seed=seed,
        )

    pretrained_module, pretrain = _fit(args, synthetic("pretrain", 1), args.pretrain_epochs, None)
    weights = save_reference_weights(pretrained_module.ema_net, args.root / "pretrained.pt")
    target = synthetic("target", 2)
    _, fine_tuned = _fit(args, target, args.epochs, weights)
    _, scratch = _fit(args, target, args.epochs, None)
    result = {
        "task": args.task,
        "scale": args.scale,
        "images": args.images,
        "imgsz": args.imgsz,
        "pretrain_fitness": pretrain,
        "fine_tuned_fitness": fine_tuned,
        "scratch_fitness": scratch,
    }
    print(json.dumps(result), flush=True)
    out = os.environ.get("OUT")
    if out:
        Path(out, "pretrained_gain.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
