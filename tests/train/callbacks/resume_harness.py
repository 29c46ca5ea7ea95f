"""A short seeded fit run as a subprocess, that can be killed mid-epoch and resumed.

Usage (from the repository root)::

    python tests/train/callbacks/resume_harness.py DATA ROOT OUT.json \
        [--kill-at STEP --signal TERM|KILL [--during step|validation|save] [--to-group]]
        [--every-n-steps N] [--workers N] [--resume CKPT] [--accelerator gpu] [--replay]
        [--precision 16-mixed]

or, from a process that already imported torch and Lightning (the tests' forkserver, which
spares each fit the seconds of importing them), ``fit_in_own_session([DATA, ROOT, OUT.json, ...],
LOG)`` in a forked child.

It trains ``yolo26n`` for 2 epochs of 4 steps (8 images, batch 2, 64 px) with a validation of 2
batches each epoch, writes checkpoints under ROOT with :class:`AtomicCheckpointIO` (in the
background, as ``lucid-yolo fit`` does, but for a SIGTERM ``--during save``) and
:class:`SigtermCheckpoint`, and at the end writes OUT.json: per step the global step, the image
ids, the loss bits and one draw from each global generator (torch, NumPy, Python; CUDA on a GPU)
taken as the batch starts, as a dropout or a user's augmentation would draw; and the digests of
the final state (weights, EMA, optimizer, scaler, scheduler, RNG, loader position).

``--kill-at`` sends the signal to the process itself ``--during``:

- ``step``: after that training step, once the checkpoints written before it are on disk;
- ``validation``: after the first batch of the validation that follows that step;
- ``save``: while the next checkpoint after that step is being written, once 1 MiB of it is
  out.

``--to-group`` sends it to the whole process group (loader workers included), as Slurm's
``scancel`` or ``kill -TERM -<pgid>`` does; run the harness in its own session then.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lucid_yolo.replay import state_digest
from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule, YoloTrainer
from lucid_yolo.train.callbacks import (
    AtomicCheckpointIO,
    BackgroundCheckpointWrites,
    RngState,
    SigtermCheckpoint,
)
from lucid_yolo.train.callbacks.rng_state import rng_state

EPOCHS = 2


class SignalMidWrite:
    """A writable file that sends ``signum`` to this process once ``after`` bytes went through."""

    def __init__(self, handle: IO[bytes], signum: int, after: int = 1 << 20) -> None:
        self.handle = handle
        self.signum = signum
        self.left = after

    def write(self, data: bytes) -> int:
        written = self.handle.write(data)
        self.left -= written
        if self.left <= 0 and self.signum:
            signum, self.signum = self.signum, 0
            os.kill(os.getpid(), signum)
        return written

    def flush(self) -> None:
        self.handle.flush()


def signal_during_next_save(signum: int) -> None:
    """Make the next ``torch.save`` into a file send ``signum`` part-way (then save as usual)."""
    save = torch.save

    def save_with_signal(obj: object, handle: Any, *args: Any, **kwargs: Any) -> None:
        torch.save = save
        save(obj, SignalMidWrite(handle, signum), *args, **kwargs)

    torch.save = save_with_signal


def send(signum: int, to_group: bool) -> None:
    """Send ``signum`` to this process, or from another process to its whole process group.

    From another process, as a scheduler sends it: torch's workers exit quietly on a SIGTERM
    from their parent, but die of one from anyone else.
    """
    if not to_group:
        os.kill(os.getpid(), signum)
        return
    sender = "import os, sys; os.killpg(int(sys.argv[1]), int(sys.argv[2]))"
    command = [sys.executable, "-c", sender, str(os.getpgrp()), str(signum)]
    subprocess.run(command, check=True, start_new_session=True)


class StepLog(Callback):
    """Records each step's batch, loss and global draws; sends the signal where asked."""

    def __init__(self, kill_at: int | None, signum: int, during: str, to_group: bool) -> None:
        self.kill_at = kill_at
        self.signum = signum
        self.during = during
        self.to_group = to_group
        self.steps: list[dict[str, Any]] = []
        self._draws: list[str] = []

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        draws = [torch.rand(1).item(), float(np.random.random()), random.random()]
        if torch.cuda.is_available():
            draws.append(torch.rand(1, device="cuda").item())
        self._draws = [draw.hex() for draw in draws]

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        self.steps.append(
            {
                "step": trainer.global_step,
                "image_ids": batch["image_ids"].tolist(),
                "loss": outputs["loss"].detach().float().cpu().numpy().tobytes().hex(),
                "draws": self._draws,
            }
        )
        if trainer.global_step != self.kill_at:
            return
        if self.during == "step":
            # A case names the checkpoint the fit resumes from: the one written before this
            # step must be on disk. A background write can outlast the steps after it (on a GPU
            # two steps take milliseconds), and a signal then finds the one before it: what a
            # real kill does, but not what the case asks.
            io = trainer.strategy.checkpoint_io
            if isinstance(io, AtomicCheckpointIO):
                io.wait()
            send(self.signum, self.to_group)
        elif self.during == "save":
            signal_during_next_save(self.signum)

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if (
            self.during == "validation"
            and trainer.global_step == self.kill_at
            and batch_idx == 0
            and not trainer.sanity_checking
        ):
            send(self.signum, self.to_group)


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


def fit_in_own_session(argv: list[str], log: str) -> None:
    """Run :func:`main` on ``argv`` in a new session, its output to the file ``log``.

    A forked child shares its parent's session and output; a session of its own keeps a
    ``--to-group`` signal away from the parent, as a process started with
    ``start_new_session=True`` would. The tests run two fits at once (the uninterrupted one
    beside the first interrupted one), so each gets one intra-op thread: two threads each on
    two shared cores wait on each other for most of the fit.

    A child of a forkserver inherits ``forkserver`` as its start method, so its loader workers
    would be forked by the forkserver: outside this session (a ``--to-group`` signal would miss
    them) and each started by pickling its loader through the server (30 s more per fit). The
    child forks them itself, as a script run on Linux does up to Python 3.13 (3.14's default is
    ``forkserver``).
    """
    torch.set_num_threads(1)
    multiprocessing.set_start_method("fork", force=True)
    os.setsid()
    with open(log, "wb") as output:
        os.dup2(output.fileno(), sys.stdout.fileno())
        os.dup2(output.fileno(), sys.stderr.fileno())
    main(argv)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("root")
    parser.add_argument("out")
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--signal", choices=("TERM", "KILL"), default="TERM")
    parser.add_argument("--during", choices=("step", "validation", "save"), default="step")
    parser.add_argument("--to-group", action="store_true")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--every-n-steps", type=int, default=None)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--replay", action="store_true")
    parser.add_argument("--precision", default=None, help="default: 32-true on cpu, else bf16")
    args = parser.parse_args(argv)

    pl.seed_everything(0, verbose=False)
    data = YoloDataModule(
        args.data,
        imgsz=64,
        batch_size=2,
        val_batch_size=1,
        workers=args.workers,
        max_instances=32,
        seed=0,
    )
    replay = ReplayConfig(network=args.replay, update=args.replay)
    module = YoloModule("yolo26n", num_classes=data.num_classes, warmup_epochs=1.0, replay=replay)
    log = StepLog(args.kill_at, getattr(signal, f"SIG{args.signal}"), args.during, args.to_group)
    trainer = YoloTrainer(  # as `lucid-yolo fit` runs
        accelerator=args.accelerator,
        devices=1,
        precision=args.precision or ("32-true" if args.accelerator == "cpu" else "bf16-mixed"),
        max_epochs=EPOCHS,
        limit_val_batches=2,
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
            # as `lucid-yolo fit` writes, but for a SIGTERM sent from inside a write: in the
            # background the step it lands in would depend on the writer thread's pace
            *(
                []
                if (args.during, args.signal) == ("save", "TERM")
                else [BackgroundCheckpointWrites()]
            ),
        ],
    )
    trainer.fit(module, data, ckpt_path=args.resume)
    result = {"steps": log.steps, "final": final_state(trainer, module)}
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
