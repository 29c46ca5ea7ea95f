"""Training gates on the synthetic data: the overfit gate and the rising-curve run.

Overfit gate (issue 5/6): a nano model fits 16 synthetic images (validated on the same images,
augmentation off) to a task metric threshold. Curve run: a larger synthetic set with the default
augmentation, validated on held-out images each epoch. Prints one line per epoch and a final
JSON line; writes the per-epoch metrics to ``--out``.

Examples (GPU machine, from source)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 tools/train_gate.py \\
        --task detect --images 16 --overfit --epochs 250 --out $OUT/gate.json
    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 tools/train_gate.py \\
        --task detect --images 512 --epochs 30 --val-every 1 --svg $OUT/curve_detect.svg
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import yaml
from lightning.pytorch.callbacks import Callback

from lucid_yolo.train import FITNESS_KIND, YoloDataModule, YoloModule
from lucid_yolo.train.data.augment.config import AugmentConfig
from lucid_yolo.train.data.synthetic import generate_synthetic

SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}


class _Curve(Callback):
    """One row per validation; rewrites ``out`` each time so a killed run keeps its curve."""

    def __init__(self, kind: str, out: Path | None) -> None:
        self.kind = kind
        self.out = out
        self.rows: list[dict[str, float]] = []
        self.start = time.perf_counter()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        m = {k: float(v) for k, v in trainer.callback_metrics.items()}
        row = {
            "epoch": trainer.current_epoch,
            "seconds": round(time.perf_counter() - self.start, 1),
            "mAP50": m.get(f"val/{self.kind}/mAP50", 0.0),
            "mAP50-95": m.get(f"val/{self.kind}/mAP50-95", 0.0),
            "loss": m.get("train/loss", float("nan")),
        }
        self.rows.append(row)
        print(json.dumps(row), flush=True)
        if self.out is not None:
            self.out.write_text(json.dumps({"curve": self.rows}, indent=1))


def curve_svg(rows: list[dict[str, float]], title: str) -> str:
    """mAP50 and mAP50-95 against epoch as a small standalone SVG (no plotting dependency)."""
    width, height, pad = 480, 300, 40
    last_epoch = max((r["epoch"] for r in rows), default=1) or 1

    def point(epoch: float, value: float) -> str:
        x = pad + (width - 2 * pad) * epoch / last_epoch
        y = height - pad - (height - 2 * pad) * value
        return f"{x:.1f},{y:.1f}"

    lines = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="{pad}" y="20">{title}</text>',
        f'<rect x="{pad}" y="{pad}" width="{width - 2 * pad}" height="{height - 2 * pad}" '
        'fill="none" stroke="#999"/>',
        f'<text x="{pad - 25}" y="{pad + 4}">1.0</text>',
        f'<text x="{pad - 25}" y="{height - pad + 4}">0.0</text>',
        f'<text x="{width - pad - 40}" y="{height - pad + 15}">epoch {last_epoch:g}</text>',
    ]
    for key, colour in (("mAP50", "#1f77b4"), ("mAP50-95", "#d62728")):
        points = " ".join(point(r["epoch"], r[key]) for r in rows)
        lines.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>'
        )
    lines.append(f'<text x="{width - pad - 120}" y="{pad + 15}" fill="#1f77b4">mAP50</text>')
    lines.append(f'<text x="{width - pad - 70}" y="{pad + 15}" fill="#d62728">mAP50-95</text>')
    lines.append("</svg>")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="detect", choices=sorted(SUFFIX))
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--val-images", type=int, default=64)
    parser.add_argument("--overfit", action="store_true", help="validate on the train images")
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--lr0", type=float, default=0.01)
    parser.add_argument("--val-every", type=int, default=10, help="validate every N epochs")
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-gate"))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--svg", type=Path, default=None, help="write the mAP curve as SVG")
    args = parser.parse_args()

    root = args.root / f"{args.task}-{args.images}"
    data_yaml = generate_synthetic(
        root,
        task=args.task,
        num_train=args.images,
        num_val=0 if args.overfit else args.val_images,
        imgsz=args.imgsz,
        seed=0,
    )
    if args.overfit:
        spec = yaml.safe_load(data_yaml.read_text())
        spec["val"] = spec["train"]
        data_yaml.write_text(yaml.safe_dump(spec, sort_keys=False))
    pl.seed_everything(0)
    data = YoloDataModule(
        data_yaml,
        task=args.task,
        imgsz=args.imgsz,
        batch_size=args.batch,
        workers=args.workers,
        max_instances=64,
        augment=AugmentConfig.off() if args.overfit else None,
        close_mosaic=0 if args.overfit else 10,
    )
    shape = data.spec.kpt_shape
    module = YoloModule(
        f"yolo26n{SUFFIX[args.task]}",
        num_classes=data.num_classes,
        kpt_shape=(17, 3) if shape is None else (shape[0], 3),
        lr0=args.lr0,
        warmup_epochs=1.0,
    )
    curve = _Curve(FITNESS_KIND[args.task], args.out)
    trainer = pl.Trainer(
        accelerator="auto",
        devices=1,
        precision=args.precision,
        max_epochs=args.epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=args.val_every,
        callbacks=[curve],
    )
    trainer.fit(module, data)
    best = max((r["mAP50"] for r in curve.rows), default=0.0)
    summary = {
        "task": args.task,
        "images": args.images,
        "overfit": args.overfit,
        "epochs": args.epochs,
        "best_mAP50": best,
        "final": curve.rows[-1] if curve.rows else None,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
    }
    if args.out is not None:
        args.out.write_text(json.dumps({"summary": summary, "curve": curve.rows}, indent=1))
    if args.svg is not None:
        title = f"yolo26n {args.task}, {args.images} synthetic images, {args.imgsz} px"
        args.svg.write_text(curve_svg(curve.rows, title))
    print("SUMMARY " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
