"""The reference's side of ``tools/loss_term_gradients.py``: Ultralytics' loss terms' gradients.

Builds the reference trainer (Ultralytics 8.4.190, a peer, never a dependency) on the same
synthetic dataset with its defaults, takes one preprocessed training batch, and prints per loss
term (the reference's gains applied, its one-to-many/one-to-one mix at epoch 0) the L2 norm of its
gradient over the backbone + neck (reference layers 0-22), its share, the norm of the whole loss's
gradient over every parameter (what its clip at norm 10 sees), and the optimizer its ``auto``
choice made. Run it in a separate environment that has Ultralytics, with the workspace sources on
the path (the dataset comes from lucid-yolo's generator)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) YOLO_OFFLINE=1 /tmp/ulvenv/bin/python \\
        tools/reference_loss_term_gradients.py --tasks detect segment pose obb --imgsz 320
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}


def _trainer(task: str, data: Path, imgsz: int, batch: int, runs: Path) -> Any:
    from ultralytics.models.yolo.detect import DetectionTrainer
    from ultralytics.models.yolo.obb import OBBTrainer
    from ultralytics.models.yolo.pose import PoseTrainer
    from ultralytics.models.yolo.segment import SegmentationTrainer

    kind = {
        "detect": DetectionTrainer,
        "segment": SegmentationTrainer,
        "pose": PoseTrainer,
        "obb": OBBTrainer,
    }[task]
    overrides = {
        "model": f"yolo26n{SUFFIX[task]}.yaml",
        "data": str(data),
        "imgsz": imgsz,
        "batch": batch,
        "epochs": 30,
        "workers": 0,
        "device": "cpu",
        "plots": False,
        "amp": False,
        "val": False,
        "project": str(runs),
        "name": task,
        "exist_ok": True,
        "verbose": False,
    }
    return kind(overrides=overrides)


def term_gradients(task: str, imgsz: int, batch: int, root: Path) -> dict[str, Any]:
    """Gradient norms of the reference's loss terms for one training batch of ``task``."""
    data = root / f"{task}-{imgsz}" / "data.yaml"
    trainer = _trainer(task, data, imgsz, batch, root / "reference-runs")
    trainer._setup_train()
    sample = trainer.preprocess_batch(next(iter(trainer.train_loader)))
    model = trainer.model.train()
    loss, items = model.loss(sample)
    every = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss.sum(), every, retain_graph=True, allow_unused=True)
    total = float(torch.stack([g.norm() for g in grads if g is not None]).norm())
    shared = [p for n, p in model.named_parameters() if int(n.split(".")[1]) < 23]
    norms: dict[str, float] = {}
    for index, name in enumerate(items):
        grads = torch.autograd.grad(loss[index], shared, retain_graph=True, allow_unused=True)
        present = [g.norm() for g in grads if g is not None]
        norms[name] = float(torch.stack(present).norm()) if present else 0.0
    summed = sum(norms.values()) or 1.0
    group = trainer.optimizer.param_groups[0]
    return {
        "task": task,
        "optimizer": type(trainer.optimizer).__name__,
        "lr": group["lr"],
        "accumulate": trainer.accumulate,
        "all terms, all parameters": round(total, 3),
        "grad_norm": {name: round(value, 3) for name, value in norms.items()},
        "share": {name: round(value / summed, 3) for name, value in norms.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(SUFFIX), choices=list(SUFFIX))
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-loss-term-gradients"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    for task in args.tasks:
        print(json.dumps(term_gradients(task, args.imgsz, args.batch, args.root)), flush=True)


if __name__ == "__main__":
    main()
