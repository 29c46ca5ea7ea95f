"""How hard each loss term pulls on the shared features (issue 13, the slow start).

Backbone and neck are shared by every term; the one-to-one branch reads them detached. Under an
SGD-type update the term with the largest gradient there steers the shared features, whatever the
others need. This tool builds a fresh network of each task, takes one augmented training batch of
the synthetic set, and prints, per weighted loss term (the gains applied, ProgLoss at epoch 0), the
L2 norm of its gradient over the backbone + neck parameters, and its share of the sum of norms; and
the norm of the whole loss's gradient over every parameter (what a clip by norm sees).

Example (CPU, a minute)::

    uv run python tools/loss_term_gradients.py --tasks detect segment pose obb --imgsz 320
"""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from pathlib import Path

import torch

from lucid_yolo.models import create_model
from lucid_yolo.train import YoloDataModule
from lucid_yolo.train.data.dataset_yaml import Task
from lucid_yolo.train.data.synthetic import generate_synthetic
from lucid_yolo.train.losses import LossGains, build_loss

MODELS = {
    "detect": "yolo26n",
    "segment": "yolo26n-seg",
    "pose": "yolo26n-pose",
    "obb": "yolo26n-obb",
}


def term_gradients(task: Task, imgsz: int, batch_size: int, root: Path) -> dict[str, float]:
    """``{term: gradient L2 norm over backbone + neck}`` for one batch of ``task``.

    Each term is isolated by a loss whose other gains are zero, so the public loss computes it
    with the trainer's scaling (gain, ProgLoss mix at epoch 0, batch size).
    """
    data_yaml = generate_synthetic(
        root / f"{task}-{imgsz}", task=task, num_train=batch_size, num_val=2, imgsz=imgsz, seed=0
    )
    data = YoloDataModule(data_yaml, task=task, imgsz=imgsz, batch_size=batch_size, workers=0)
    data.setup("fit")
    kpt_shape = data.spec.kpt_shape
    batch = next(iter(data.train_dataloader()))
    if kpt_shape is None:
        net = create_model(MODELS[task], num_classes=data.num_classes, seed=0)
    else:
        net = create_model(MODELS[task], num_classes=data.num_classes, kpt_shape=kpt_shape, seed=0)
    net.train()
    options: dict[str, object] = {"strides": net.strides}
    if kpt_shape is not None:
        options["num_keypoints"] = kpt_shape[0]
    shared = [p for name, p in net.named_parameters() if name.startswith(("backbone", "neck"))]
    outputs = net(batch["images"].float() / 255.0)
    full, terms = build_loss(task, data.num_classes, **options)(outputs, batch, 0.0)
    every = [p for p in net.parameters() if p.requires_grad]
    grads = torch.autograd.grad(full, every, retain_graph=True, allow_unused=True)
    present = [g.norm() for g in grads if g is not None]
    names = [name for name in terms if "/" not in name and name != "o2m_weight"]
    defaults = LossGains()
    norms: dict[str, float] = {"all terms, all parameters": float(torch.stack(present).norm())}
    for index, name in enumerate(names):
        only = LossGains(
            **{f.name: 0.0 for f in fields(LossGains)} | {name: getattr(defaults, name)}
        )
        total, _ = build_loss(task, data.num_classes, gains=only, **options)(outputs, batch, 0.0)
        grads = torch.autograd.grad(
            total, shared, retain_graph=index < len(names) - 1, allow_unused=True
        )
        present = [g.norm() for g in grads if g is not None]
        norms[name] = float(torch.linalg.vector_norm(torch.stack(present))) if present else 0.0
    return norms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-loss-term-gradients"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    for task in args.tasks:
        norms = term_gradients(task, args.imgsz, args.batch, args.root)
        terms = {name: value for name, value in norms.items() if not name.startswith("all ")}
        total = sum(terms.values()) or 1.0
        shares = {name: round(value / total, 3) for name, value in terms.items()}
        rounded = {name: round(value, 3) for name, value in norms.items()}
        print(json.dumps({"task": task, "grad_norm": rounded, "share": shares}))


if __name__ == "__main__":
    main()
