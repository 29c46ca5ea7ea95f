"""Where a validation pass spends its time: loader wait, network, metric update, metric compute.

Issue 11 asks for validation at GPU speed; this measures today's split before anything changes.
It validates a ``yolo26n`` of one task on a synthetic validation split with Lightning's
``Trainer.validate`` (bf16 on a GPU), ``--repeats`` times after one warm-up pass (cache fill,
cuDNN autotuning), and times each phase with a CUDA synchronisation on both sides. The network is
first trained ``--train-epochs`` epochs on the synthetic training split: the metric's work
depends on how many predictions overlap a target, which a fresh network's hardly do.

- *wait*: from the end of one batch's work to the start of the next (the loader, Lightning);
- *network*: the EMA network's forward;
- *update*: :meth:`Evaluator.update` (decode, per-image predictions and targets, matching);
- *compute*: :meth:`Evaluator.compute` at the epoch end (precision curves, mAP).

The synchronisations make the phases add up, at the cost of the overlap an unsynchronised pass
would have; the whole pass is also timed once without them. A cProfile of one pass lists the
host functions that take the time. Prints a table; with ``$OUT`` set also writes
``$OUT/profile_validation.json`` and ``$OUT/profile_validation_cprofile.txt``.

Command (GPU machine, from the repository root)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 tools/profile_validation.py \\
        --tasks detect segment --images 128 --imgsz 640 --batch 16 --train-epochs 5

A CPU check with small numbers:
``--images 8 --imgsz 64 --batch 4 --repeats 1 --train-images 8 --train-epochs 1``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from lucid_yolo.train import YoloDataModule, YoloModule
from lucid_yolo.train.data.synthetic import generate_synthetic

SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class PhaseClock(pl.Callback):
    """Seconds per phase of the validation passes it sees; the loader wait between batches."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._batch_end = 0.0

    def timed(self, phase: str, call: Callable[..., Any]) -> Callable[..., Any]:
        """``call`` wrapped so that its synchronised duration is added to ``phase``."""

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            _sync()
            start = time.perf_counter()
            result = call(*args, **kwargs)
            _sync()
            self.seconds[phase] += time.perf_counter() - start
            return result

        return wrapper

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        _sync()
        self._batch_end = time.perf_counter()

    def on_validation_batch_start(self, *args: Any) -> None:
        self.seconds["wait"] += time.perf_counter() - self._batch_end

    def on_validation_batch_end(self, *args: Any) -> None:
        _sync()
        self._batch_end = time.perf_counter()


def _instrumented(module: YoloModule, clock: PhaseClock) -> None:
    module.ema_net.forward = clock.timed("network", module.ema_net.forward)  # type: ignore[method-assign]
    evaluator = module.evaluator
    evaluator.update = clock.timed("update", evaluator.update)  # type: ignore[method-assign]
    evaluator.compute = clock.timed("compute", evaluator.compute)  # type: ignore[method-assign]


def profile_task(task: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    data_yaml = generate_synthetic(
        root / task,
        task=task,
        num_train=4,
        num_val=args.images,
        imgsz=args.imgsz,  # type: ignore[arg-type]
    )
    data = YoloDataModule(data_yaml, imgsz=args.imgsz, batch_size=args.batch, workers=args.workers)
    module = YoloModule(f"yolo26n{SUFFIX[task]}", num_classes=data.num_classes)
    cuda = torch.cuda.is_available()
    common: dict[str, Any] = {
        "accelerator": "gpu" if cuda else "cpu",
        "devices": 1,
        "precision": "bf16-mixed" if cuda else "32-true",
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": root / "runs",
    }
    if args.train_epochs:
        pl.Trainer(
            **common,
            max_epochs=args.train_epochs,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            enable_checkpointing=False,
        ).fit(module, data)
    trainer = pl.Trainer(**common)
    trainer.validate(module, data, verbose=False)
    plain = []
    for _ in range(args.repeats):
        _sync()
        start = time.perf_counter()
        trainer.validate(module, data, verbose=False)
        _sync()
        plain.append(time.perf_counter() - start)
    clock = PhaseClock()
    trainer.callbacks.append(clock)
    _instrumented(module, clock)
    for _ in range(args.repeats):
        trainer.validate(module, data, verbose=False)
    phases = {k: v / args.repeats for k, v in clock.seconds.items()}
    profiler = cProfile.Profile()
    profiler.enable()
    trainer.validate(module, data, verbose=False)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    return {
        "task": task,
        "images": args.images,
        "imgsz": args.imgsz,
        "batch": args.batch,
        "train_epochs": args.train_epochs,
        "pass_seconds": sorted(plain),
        "phase_seconds": phases,
        "cprofile": text.getvalue(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["detect"], choices=list(SUFFIX))
    parser.add_argument("--images", type=int, default=128, help="validation images")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-epochs", type=int, default=0, help="train first (see above)")
    parser.add_argument("--train-images", type=int, default=512)
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-profile-validation"))
    args = parser.parse_args()
    out = Path(os.environ["OUT"]) if "OUT" in os.environ else None
    results = []
    for task in args.tasks:
        result = profile_task(task, args, args.root)
        results.append(result)
        median = result["pass_seconds"][len(result["pass_seconds"]) // 2]
        phases = ", ".join(f"{k} {v:.3f} s" for k, v in result["phase_seconds"].items())
        print(f"{task}: validation pass {median:.3f} s (median of {args.repeats}); {phases}")
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            summary = [{k: v for k, v in r.items() if k != "cprofile"} for r in results]
            (out / "profile_validation.json").write_text(json.dumps(summary, indent=1))
            with (out / "profile_validation_cprofile.txt").open("a") as file:
                file.write(f"=== {task}\n{result['cprofile']}\n")


if __name__ == "__main__":
    main()
