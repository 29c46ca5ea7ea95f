"""Long replayed fit with validation, checkpoints and a resume in the middle; memory per epoch.

Issue 15's soak: a few thousand replayed training steps must keep reserved CUDA memory and host
RSS flat after the first epoch, and a resume from ``last.ckpt`` halfway must carry on. The fit
runs in two processes (this script calls itself with ``--part``): the first trains
``--epochs // 2`` epochs and exits as if stopped; the second resumes from its ``last.ckpt`` to
``--epochs``. The data set and the checkpoints live in a temporary folder, removed at the end:
``$OUT`` gets only the small result file (a checkpoint or the images would go over what a GPU
run brings back). Each epoch end appends one row to ``$OUT/soak/soak.json``: part, epoch, global
step, reserved and allocated CUDA memory (bytes), host RSS (bytes, from ``/proc/self/statm``), the
replay telemetry and ``val/box/mAP50-95``.

Command (on the GPU machine, from the repository root; about 3,000 replayed steps)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) OUT=${OUT:-out} \\
        python tools/soak.py --images 512 --batch 4 --epochs 24 --imgsz 320

On a CPU it runs natively (no replay) with small numbers, to check the script:
``python tools/soak.py --images 16 --batch 4 --epochs 2 --imgsz 64 --no-replay``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
from lucid_yolo.train.callbacks import AtomicCheckpointIO, RngState, SigtermCheckpoint
from lucid_yolo.train.data.synthetic import generate_synthetic


def host_rss() -> int:
    """Resident set size of this process now, bytes (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


class MemoryLog(pl.Callback):
    """Appends one JSON row per epoch end to ``path``."""

    def __init__(self, path: Path, part: int) -> None:
        self.path = path
        self.part = part

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        cuda = torch.cuda.is_available()
        metrics = trainer.callback_metrics
        row: dict[str, Any] = {
            "part": self.part,
            "epoch": trainer.current_epoch,
            "step": trainer.global_step,
            "reserved": torch.cuda.memory_reserved() if cuda else 0,
            "allocated": torch.cuda.memory_allocated() if cuda else 0,
            "rss": host_rss(),
            "telemetry": pl_module.replay_telemetry.as_dict()
            if isinstance(pl_module, YoloModule)
            else {},
            "map50_95": float(metrics["val/box/mAP50-95"])
            if "val/box/mAP50-95" in metrics
            else None,
        }
        rows = json.loads(self.path.read_text()) if self.path.is_file() else []
        rows.append(row)
        self.path.write_text(json.dumps(rows, indent=1))
        print(f"soak: {json.dumps(row)}", flush=True)


def run_part(args: argparse.Namespace, out: Path, work: Path) -> None:
    """One process: part 1 trains the first half, part 2 resumes and trains the rest."""
    pl.seed_everything(0, verbose=False)
    data = YoloDataModule(
        work / "data" / "data.yaml", imgsz=args.imgsz, batch_size=args.batch, workers=args.workers
    )
    on = not args.no_replay
    module = YoloModule(
        "yolo26n", num_classes=data.num_classes, replay=ReplayConfig(network=on, update=on)
    )
    cuda = torch.cuda.is_available()
    last = work / "checkpoints" / "last.ckpt"
    trainer = pl.Trainer(
        accelerator="gpu" if cuda else "cpu",
        devices=1,
        precision="bf16-mixed" if cuda else "32-true",
        max_epochs=args.epochs if args.part == 2 else args.epochs // 2,
        logger=False,
        enable_progress_bar=False,
        default_root_dir=work,
        plugins=[AtomicCheckpointIO()],
        callbacks=[
            ModelCheckpoint(
                dirpath=work / "checkpoints", filename="last", enable_version_counter=False
            ),
            SigtermCheckpoint(),
            RngState(),
            MemoryLog(out / "soak.json", args.part),
        ],
    )
    trainer.fit(module, data, ckpt_path=str(last) if args.part == 2 else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=512, help="training images")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=24, help="total; resumed at half")
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--no-replay", action="store_true", help="native (for a CPU check)")
    parser.add_argument("--part", type=int, choices=(1, 2), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    out = Path(os.environ.get("OUT", "out")) / "soak"
    if args.part is not None:
        run_part(args, out, args.work)
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="soak-") as work:
        generate_synthetic(
            Path(work) / "data",
            num_train=args.images,
            num_val=max(args.images // 8, 4),
            imgsz=args.imgsz,
        )
        for part in ("1", "2"):
            command = [sys.executable, __file__, *sys.argv[1:], "--part", part, "--work", work]
            subprocess.run(command, check=True)
    rows = json.loads((out / "soak.json").read_text())
    later = [r for r in rows if r["epoch"] >= 1]
    for key in ("reserved", "rss"):
        values = [r[key] for r in later]
        if values:
            print(f"soak: {key} after epoch 0: min {min(values)} max {max(values)} bytes")


if __name__ == "__main__":
    main()
