"""Whether a fit depends on its target rows per image (``max_instances``) while none is cut.

``YoloDataModule(max_instances=None)`` pads each training image to the most instances a sample
can hold instead of a fixed 100 (:mod:`lucid_yolo.train.data.target_rows`), which shrinks the
label assignment's (batch, rows, anchors) tensors. That is only free if the padded rows change
nothing. This tool fits each task once per row count, the same seed, mosaic on and validation on,
and compares each fit with the first one bitwise: the digests of model, EMA, optimizer and
scheduler (``parity_matrix.fit_state_digests``), every per-step loss and the validation
metrics. It also reports the instances the data path cut (``overflow``), which must be 0 for the
comparison to be a fair one.

Run (CPU, the dev machine, about a minute per task; ``--accelerator gpu`` on the GPU machine
fits in bf16 with every replay region on)::

    uv run python tools/max_instances_parity.py --tasks detect segment pose obb \\
        --rows 100 48 24 auto --out /tmp/max_instances_parity.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
from lucid_yolo.train.data.dataset_yaml import Task
from lucid_yolo.train.data.synthetic import generate_synthetic
from parity_matrix import SUFFIX, TASKS, Record, fit_state_digests, parity_trainer


def fit(yaml: Path, task: Task, rows: int | None, args: argparse.Namespace) -> dict[str, Any]:
    """One fit with ``rows`` target rows per training image (``None``: the data module's
    choice): its digests, losses and counts."""
    pl.seed_everything(0)
    data = YoloDataModule(
        yaml, task=task, imgsz=args.imgsz, batch_size=args.batch, workers=0, max_instances=rows
    )
    shape = data.spec.kpt_shape
    gpu = args.accelerator == "gpu"
    module = YoloModule(
        f"yolo26n{SUFFIX[task]}",
        num_classes=data.num_classes,
        kpt_shape=(17, 3) if shape is None else (shape[0], 3),
        replay=ReplayConfig(
            network=gpu, segment_heads=gpu and task == "segment", loss=gpu, update=gpu
        ),
    )
    record = Record()
    trainer = parity_trainer(
        args.accelerator,
        [record],
        precision="bf16-mixed" if gpu else "32-true",
        max_steps=args.steps,
        limit_val_batches=1,
    )
    trainer.fit(module, data)
    return {
        "rows": data.datasets["train"].max_instances,
        "asked": "auto" if rows is None else rows,
        "digests": fit_state_digests(trainer, module),
        "losses": record.losses,
        "val": record.val,
        "overflow": data.data_stats()["overflow"],
    }


def compare(fits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each fit against the first: how many digests differ, whether losses and metrics are equal."""
    first = fits[0]
    return [
        {
            "rows": f["rows"],
            "asked": f["asked"],
            "overflow": f["overflow"],
            "digests_differ": sum(
                f["digests"].get(k) != digest for k, digest in first["digests"].items()
            ),
            "digests": len(first["digests"]),
            "losses_equal": f["losses"] == first["losses"],
            "val_equal": f["val"] == first["val"],
        }
        for f in fits
    ]


def _state(row: dict[str, Any]) -> str:
    if not row["digests_differ"]:
        return "yes"
    return f"no: {row['digests_differ']} of {row['digests']} tensors differ"


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    """Markdown: one row per task and row count."""
    lines = [
        "| task | max_instances | rows | instances cut | state equal to the first | losses equal "
        "| val equal |",
        "|---|---|---:|---:|---|---|---|",
    ]
    for task, rows in results.items():
        lines += [
            f"| {task} | {r['asked']} | {r['rows']} | {r['overflow']} | "
            f"{_state(r)} | "
            f"{'yes' if r['losses_equal'] else 'no'} | {'yes' if r['val_equal'] else 'no'} |"
            for r in rows
        ]
    return "\n".join(lines) + "\n"


def _rows(text: str) -> int | None:
    return None if text == "auto" else int(text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument(
        "--rows",
        nargs="+",
        type=_rows,
        default=[100, 48, 24, None],
        help="target rows per training image of each fit; auto: the data module's choice",
    )
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--imgsz", type=int, default=64)
    parser.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--out", type=Path, default=Path("max_instances_parity.json"))
    args = parser.parse_args(argv)
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for task in args.tasks:
            yaml = generate_synthetic(
                Path(folder) / task, task=task, num_train=8, num_val=4, imgsz=128, seed=0
            )
            results[task] = compare([fit(yaml, task, rows, args) for rows in args.rows])
    args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, **results}))
    args.out.with_suffix(".md").write_text(table(results))
    print(table(results), end="")


if __name__ == "__main__":
    main()
