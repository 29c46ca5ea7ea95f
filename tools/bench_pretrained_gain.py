"""What starting from pretrained weights gains: fine-tune against from scratch, same epochs.

Trains a network on one synthetic set (the "pretraining" set, its own seed), writes its EMA
weights as a user would bring them (a state dict under Ultralytics' names,
:func:`lucid_yolo.models.save_reference_weights`), then fits a second synthetic set (another seed,
so other images) twice for the same epochs, each in its own process and both at once: once from
those weights (``weights=``, the path of ``--model.weights``) and once from scratch. Every
validation's mAP50-95 (the task's fitness) is written as it comes to
``$OUT/pretrained_gain.json`` (or ``--root``), so a run cut by a time limit keeps the epochs it
finished.

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
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}
FITNESS = "val/fitness"
STAGES = ("pretrain", "fine_tuned", "scratch")
"""The three fits; ``fine_tuned`` and ``scratch`` run at once after ``pretrain``."""
RESULT = "pretrained_gain.json"


def _parser() -> argparse.ArgumentParser:
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
    parser.add_argument("--grad-clip-norm", type=float, default=0.0, help="0: no clip")
    parser.add_argument(
        "--pretrain-max-s",
        type=float,
        help="stop the pretraining after this many seconds (Lightning's max_time)",
    )
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-pretrained-gain"))
    parser.add_argument(
        "--stage", choices=("target", *STAGES), help="one fit, or the fine-tuning set (internal)"
    )
    return parser


def _synthetic(args: argparse.Namespace, name: str, seed: int) -> Path:
    from lucid_yolo.train.data.synthetic import generate_synthetic

    return generate_synthetic(
        args.root / name,
        task=args.task,
        num_train=args.images,
        num_val=max(args.images // 4, 8),
        imgsz=args.imgsz,
        seed=seed,
    )


def _fit(
    args: argparse.Namespace,
    data_yaml: Path,
    epochs: int,
    weights: Path | None,
    max_s: float | None = None,
) -> None:
    """One fit; its fitness after every validation goes to ``<root>/<stage>.json``, and the
    pretraining fit's EMA to ``<root>/pretrained.pt`` under the reference's names."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import Callback

    from lucid_yolo.models import YOLO26, save_reference_weights
    from lucid_yolo.train import YoloDataModule, YoloModule

    curve: list[float] = []
    record = args.root / f"{args.stage}.json"

    class Fitness(Callback):
        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            if not trainer.sanity_checking:
                curve.append(round(float(trainer.callback_metrics[FITNESS]), 4))
                record.write_text(json.dumps(curve))

    pl.seed_everything(0)
    data = YoloDataModule(
        data_yaml, task=args.task, imgsz=args.imgsz, batch_size=args.batch, workers=args.workers
    )
    module = YoloModule(
        f"yolo26{args.scale}{SUFFIX[args.task]}",
        num_classes=data.num_classes,
        weights=None if weights is None else str(weights),
        warmup_min_steps=args.warmup_min_steps,
        grad_clip_norm=args.grad_clip_norm,
    )
    trainer = pl.Trainer(
        accelerator=args.accelerator,
        devices=1,
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[Fitness()],
        max_time=None if max_s is None else {"seconds": int(max_s)},
    )
    trainer.fit(module, data)
    if args.stage == "pretrain":
        if not isinstance(module.ema_net, YOLO26):
            raise TypeError(f"the EMA network is a {type(module.ema_net).__name__}, not a YOLO26")
        save_reference_weights(module.ema_net, args.root / "pretrained.pt")


def _run_stage(args: argparse.Namespace) -> None:
    if args.stage == "pretrain":
        data = _synthetic(args, "pretrain", 1)
        _fit(args, data, args.pretrain_epochs, None, args.pretrain_max_s)
        return
    target = args.root / "target" / "data.yaml"
    weights = args.root / "pretrained.pt" if args.stage == "fine_tuned" else None
    _fit(args, target, args.epochs, weights)


def _spawn(stage: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-u", __file__, *sys.argv[1:], "--stage", stage])


def _write(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    result: dict[str, Any] = {
        "task": args.task,
        "scale": args.scale,
        "images": args.images,
        "imgsz": args.imgsz,
        "grad_clip_norm": args.grad_clip_norm,
    }
    for stage in STAGES:
        path = args.root / f"{stage}.json"
        result[f"{stage}_fitness"] = json.loads(path.read_text()) if path.exists() else []
    out.mkdir(parents=True, exist_ok=True)
    (out / RESULT).write_text(json.dumps(result, indent=1))
    return result


def main() -> None:
    args = _parser().parse_args()
    if args.stage == "target":
        _synthetic(args, "target", 2)
        return
    if args.stage is not None:
        _run_stage(args)
        return
    args.root.mkdir(parents=True, exist_ok=True)
    for stage in STAGES:
        (args.root / f"{stage}.json").unlink(missing_ok=True)
    out = Path(os.environ.get("OUT") or args.root)
    # A time limit's SIGTERM still writes what the fits recorded (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    running = [_spawn("target"), _spawn("pretrain")]  # the fine-tuning set while pretraining
    try:
        for process in running:
            process.wait()
        _write(args, out)
        running = [_spawn("fine_tuned"), _spawn("scratch")]
        for process in running:
            process.wait()
    finally:
        for process in running:
            process.kill()
        print(json.dumps(_write(args, out)), flush=True)


if __name__ == "__main__":
    main()
