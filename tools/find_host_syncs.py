"""List every place a replayed training step waits for the GPU (host synchronisation).

A replayed step should be: copy the batch in, launch the graphs, return. Any synchronisation on
the way (``.item()``, a device-to-host copy, ``nonzero``) makes the host wait for the GPU, so the
next batch's data wait adds to the step instead of overlapping it. This tool runs a short fit with
the replay regions on and, from the second epoch, turns on torch's synchronisation debug mode; it
records the Python stack of each synchronisation, and prints the distinct call sites (the frames
inside lucid_yolo and Lightning) with how many times each fired per training step.

Run (GPU machine, repository root)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 tools/find_host_syncs.py --batch 16
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
from lucid_yolo.train.data.synthetic import generate_synthetic

Site = tuple[str, ...]


class SyncRecorder(pl.Callback):
    """Counts synchronisations inside training steps (from epoch 1 on), by call site."""

    def __init__(self) -> None:
        self.sites: collections.Counter[Site] = collections.Counter()
        self.steps = 0
        self._inside = False
        self._previous = warnings.showwarning

    def _record(self, message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        if self._inside and "synchronizing" in str(message):
            frames = traceback.extract_stack()[:-2]
            ours = [
                f"{Path(f.filename).name}:{f.lineno} {f.name}"
                for f in frames
                if "lucid_yolo" in f.filename or "lightning" in f.filename
            ]
            self.sites[tuple(ours[-4:])] += 1
            return
        self._previous(message, category, *args, **kwargs)

    def on_train_batch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        if trainer.current_epoch >= 1:
            self._inside = True
            warnings.showwarning = self._record
            torch.cuda.set_sync_debug_mode("warn")

    def on_train_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        if self._inside:
            torch.cuda.set_sync_debug_mode("default")
            self._inside = False
            self.steps += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default="detect")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None, help="write the sites as JSON")
    args = parser.parse_args()
    warnings.simplefilter("always")
    root = Path(tempfile.mkdtemp(prefix="host-syncs-"))
    data = generate_synthetic(
        root, task=args.task, num_train=args.images, num_val=8, imgsz=args.imgsz
    )
    dm = YoloDataModule(data, task=args.task, imgsz=args.imgsz, batch_size=args.batch)
    suffix = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}[args.task]
    module = YoloModule(
        f"yolo26n{suffix}",
        num_classes=dm.num_classes,
        replay=ReplayConfig(
            network=True,
            segment_heads=args.task == "segment",
            loss=True,
            update=True,
        ),
    )
    recorder = SyncRecorder()
    trainer = pl.Trainer(
        accelerator="gpu",
        devices=1,
        precision="bf16-mixed",
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder],
    )
    trainer.fit(module, dm)
    rows = [
        {"per_step": count / max(1, recorder.steps), "site": list(site)}
        for site, count in recorder.sites.most_common()
    ]
    print(f"{recorder.steps} steps observed; {sum(recorder.sites.values())} synchronisations")
    for row in rows:
        print(f"{row['per_step']:6.2f}/step  " + "  <-  ".join(reversed(row["site"])))
    if args.out is not None:
        args.out.write_text(json.dumps({"steps": recorder.steps, "sites": rows}, indent=2))


if __name__ == "__main__":
    main()
