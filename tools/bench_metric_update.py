"""CPU cost of the validation metric alone: ``Evaluator.update`` and ``compute`` on saved inputs.

A whole validation pass on a shared machine mixes the network, the loader and the machine's load
into its wall time. This saves a fresh ``yolo26n``'s raw outputs and batches of one validation
pass once (seeded, so every version of the code sees the same inputs), then times the evaluator
over them in **process CPU time** of one torch thread, which other processes on the machine do
not inflate: ``update`` of every batch, then ``compute`` (a segment batch is scored at the next
``update`` or at ``compute``, so compare their sum), the minimum of ``--repeats``.

Command (any machine, from the repository root)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 tools/bench_metric_update.py \\
        --tasks detect segment pose obb --images 16 --imgsz 128 --batch 8

``--inputs DIR`` keeps the saved inputs there (``<task>.pt``) and reuses them, so another
checkout can be timed on the same ones (``PYTHONPATH`` pointing at its packages).

It also counts the torch operations one ``update`` dispatches per image (the second batch, after a
warm one), with the metric's CPU-only shortcuts switched off so that the code takes the path it
takes on a GPU, where each operation is a kernel launch the host pays for (issue 11, session 6),
and the batch's count by phase (:data:`PHASES`; ``add_scored`` and ``update_batch`` hold the
matching of the batch before, replayed on a GPU, and for a mask task ``update_batch`` the batch
before's masks and their scoring, whose part before the masks is that batch's ``score``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from dispatch_count import DispatchCount
from lucid_yolo.train import Evaluator, YoloDataModule, YoloModule
from lucid_yolo.train.data.synthetic import generate_synthetic
from lucid_yolo.train.metrics import host_shortcuts

SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}

PHASES = (
    "_score",
    "_top_k",
    "_source_predictions",
    "_source_targets",
    "score_batch",
    "add_scored",
    "update_batch",
)
"""The evaluator's steps whose operations are counted apart (the last three the metric's).
``score`` is what a GPU replays from one graph: the next three and, for boxes, keypoints and
rotated boxes, ``score_batch``; ``add_scored`` keeps the batch and matches the one before;
``update_batch`` is a mask batch's scoring, one update late (its ``score_batch`` inside it)."""

_METRIC_PHASES = ("score_batch", "add_scored", "update_batch")


def save_inputs(task: str, args: argparse.Namespace, path: Path) -> None:
    """A fresh seeded network's raw outputs and the batches they came from, saved to ``path``."""
    torch.manual_seed(0)
    yaml = generate_synthetic(
        path.parent / f"{task}-data",
        task=task,  # type: ignore[arg-type]
        num_train=2,
        num_val=args.images,
        imgsz=args.imgsz,
    )
    data = YoloDataModule(
        yaml, imgsz=args.imgsz, batch_size=args.batch, val_batch_size=args.batch, workers=0
    )
    data.setup("validate")
    options: dict[str, Any] = {}
    if data.spec.kpt_shape is not None:
        options["kpt_shape"] = tuple(data.spec.kpt_shape)
    module = YoloModule(f"yolo26n{SUFFIX[task]}", num_classes=data.num_classes, **options)
    network = module.ema_net.eval()
    with torch.no_grad():
        saved = [
            (dict(network(batch["images"].float() / 255)), batch) for batch in data.val_dataloader()
        ]
    torch.save({"strides": module.evaluator.strides, "batches": saved}, path)


def time_metric(path: Path, task: str, repeats: int) -> dict[str, float]:
    """Minimum process CPU seconds of the updates, the compute and their sum over ``repeats``."""
    saved = torch.load(path, weights_only=False)
    evaluator = Evaluator(task, strides=saved["strides"], conf=0.001, max_det=300)
    runs = []
    for _ in range(repeats):
        evaluator.reset()
        start = time.process_time()
        for outputs, batch in saved["batches"]:
            evaluator.update(outputs, batch)
        updated = time.process_time()
        fitness = evaluator.compute()["fitness"]
        runs.append((updated - start, time.process_time() - updated))
    return {
        "update": min(u for u, _ in runs),
        "compute": min(c for _, c in runs),
        "total": min(u + c for u, c in runs),
        "fitness": fitness,
    }


def count_operations(path: Path, task: str) -> dict[str, float]:
    """Torch operations of one ``update`` on the GPU's path (CPU shortcuts off): ``per_image``,
    and the batch's count in each of :data:`PHASES`; empty with fewer than two batches."""
    saved = torch.load(path, weights_only=False)
    if len(saved["batches"]) < 2:
        return {}
    (warm_outputs, warm_batch), (outputs, batch) = saved["batches"][:2]
    taken = host_shortcuts.taken
    host_shortcuts.taken = lambda device: False
    try:
        evaluator = Evaluator(task, strides=saved["strides"], conf=0.001, max_det=300)
        evaluator.update(warm_outputs, warm_batch)
        phases: dict[str, float] = {}
        for name in PHASES:
            owner = evaluator.metric if name in _METRIC_PHASES else evaluator
            setattr(owner, name, _counting(getattr(owner, name), name.lstrip("_"), phases))
        with DispatchCount() as seen:
            evaluator.update(outputs, batch)
    finally:
        host_shortcuts.taken = taken
    return {"per_image": sum(seen.ops.values()) / batch["images"].shape[0], **phases}


def _counting(method: Any, label: str, counts: dict[str, float]) -> Any:
    """``method``, storing the operations each call dispatches under ``label``."""

    def counted(*args: Any, **kwargs: Any) -> Any:
        with DispatchCount() as seen:
            result = method(*args, **kwargs)
        counts[label] = counts.get(label, 0) + sum(seen.ops.values())
        return result

    return counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["detect"], choices=list(SUFFIX))
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--imgsz", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--inputs", type=Path, default=Path("/tmp/lucid-bench-metric-update"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.inputs.mkdir(parents=True, exist_ok=True)
    for task in args.tasks:
        path = args.inputs / f"{task}.pt"
        if not path.exists():
            save_inputs(task, args, path)
        seconds = time_metric(path, task, args.repeats)
        operations = count_operations(path, task)
        phases = ", ".join(f"{k} {v:.0f}" for k, v in operations.items() if k != "per_image")
        per_image = operations.get("per_image", float("nan"))
        print(
            f"{task}: update + compute {seconds['total']:.4f} s CPU (update {seconds['update']:.4f}"
            f" s, compute {seconds['compute']:.4f} s; min of {args.repeats}, one thread); "
            f"fitness {seconds['fitness']:.6g}; {per_image:.0f} operations "
            f"per image in an update on the GPU's path (a batch's: {phases})"
        )


if __name__ == "__main__":
    main()
