"""A short seeded fit run as a subprocess, that can be killed mid-epoch and resumed.

Usage (from the repository root)::

    python tests/train/callbacks/resume_harness.py DATA ROOT OUT.json \
        [--kill-at STEP --signal TERM|KILL] [--every-n-steps N] [--resume CKPT] [--accelerator gpu]
        [--replay]

It trains ``yolo26n`` for 2 epochs of 4 steps (8 images, batch 2, 64 px) with validation each
epoch, writes checkpoints under ROOT with :class:`AtomicCheckpointIO` and
:class:`SigtermCheckpoint`, and at the end writes OUT.json: per step the global step, the image
ids and the loss bits, and the digests of the final state (weights, EMA, optimizer, scaler,
scheduler, RNG, loader position). ``--kill-at`` sends the signal to itself after that step.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lucid_yolo.replay import state_digest
from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
from lucid_yolo.train.callbacks import AtomicCheckpointIO, RngState, SigtermCheckpoint
from lucid_yolo.train.callbacks.rng_state import rng_state

EPOCHS = 2


class StepLog(Callback):
    """Records each step's batch and loss; kills the process after ``kill_at`` when asked."""

    def __init__(self, kill_at: int | None, signum: int) -> None:
        self.kill_at = kill_at
        self.signum = signum
        self.steps: list[dict[str, Any]] = []

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        self.steps.append(
            {
                "step": trainer.global_step,
                "image_ids": batch["image_ids"].tolist(),
                "loss": outputs["loss"].detach().float().cpu().numpy().tobytes().hex(),
            }
        )
        if trainer.global_step == self.kill_at:
            os.kill(os.getpid(), self.signum)


def final_state(trainer: pl.Trainer, module: YoloModule) -> dict[str, str]:
    """Digests of everything a resumed fit must reproduce."""
    state: dict[str, Any] = {
        "model": module.net.state_dict(),
        "ema": module.ema_net.state_dict(),
        "ema_updates": module.ema.updates,
        "optimizer": trainer.optimizers[0].state_dict(),
        "scheduler": trainer.lr_scheduler_configs[0].scheduler.state_dict(),
        "rng": rng_state(),
    }
    scaler = getattr(trainer.precision_plugin, "scaler", None)
    if scaler is not None:
        state["scaler"] = scaler.state_dict()
    digests = state_digest(state)
    loader = trainer.train_dataloader
    digests["loader"] = json.dumps(loader.state_dict() if hasattr(loader, "state_dict") else None)
    return digests


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("root")
    parser.add_argument("out")
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--signal", choices=("TERM", "KILL"), default="TERM")
    parser.add_argument("--every-n-steps", type=int, default=None)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--replay", action="store_true")
    args = parser.parse_args()

    pl.seed_everything(0, verbose=False)
    data = YoloDataModule(args.data, imgsz=64, batch_size=2, workers=0, max_instances=32, seed=0)
    replay = ReplayConfig(network=args.replay, update=args.replay)
    module = YoloModule("yolo26n", num_classes=data.num_classes, warmup_epochs=1.0, replay=replay)
    log = StepLog(args.kill_at, getattr(signal, f"SIG{args.signal}"))
    trainer = pl.Trainer(
        accelerator=args.accelerator,
        devices=1,
        precision="32-true" if args.accelerator == "cpu" else "bf16-mixed",
        max_epochs=EPOCHS,
        limit_val_batches=1,
        deterministic=True,
        benchmark=False,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=args.root,
        plugins=[AtomicCheckpointIO()],
        callbacks=[
            ModelCheckpoint(
                filename="last",
                enable_version_counter=False,
                every_n_train_steps=args.every_n_steps,
            ),
            SigtermCheckpoint(),
            RngState(),
            log,
        ],
    )
    trainer.fit(module, data, ckpt_path=args.resume)
    result = {"steps": log.steps, "final": final_state(trainer, module)}
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
