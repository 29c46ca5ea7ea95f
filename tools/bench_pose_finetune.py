"""Pose fine-tuned from one Ultralytics checkpoint: lucid-yolo's Laplace loss against the flow.

Issue 14 lets lucid-yolo keep its Laplace keypoint likelihood instead of the reference's
residual log-likelihood with a RealNVP flow only if a measurement shows it trains as well. This
tool measures that the way a user meets it, each fit in its own process:

1. two synthetic pose sets, A (seed 1) and B (seed 2, other images);
2. ``pretrain``: Ultralytics trains ``yolo26n-pose.yaml`` on A for a fixed time; its ``last.pt``,
   as its trainer saves it, is the checkpoint the user brings;
3. concurrently, each fine-tune fits B from that file for the same epochs and records its own
   evaluator's pose mAP50-95 after every epoch:
    - ``lucid``: lucid-yolo (``YoloModule(weights=...)``, what ``--model.weights`` does), its
      Laplace loss and MuSGD, with ``--grad-clip-norm`` as given;
    - ``ultralytics``: ``YOLO(last.pt).train(...)``, the flow loss, ``--optimizer`` as given;
4. ``cross``: each fine-tune's last weights evaluated by the other tool's evaluator too. The two
   evaluators' OKS differ for a 5-keypoint skeleton (lucid-yolo gives every keypoint the mean
   COCO sigma, 0.0669; Ultralytics ``1/K`` = 0.2), so only one evaluator compares two fits.

Both fits use fp32, the same batch, image size, warm-up epochs (lucid-yolo without its
100-step minimum, which the reference lacks) and mosaic closing; the optimizers are each tool's.
Results go to ``$OUT/pose_finetune.json`` (or ``--root``), updated after every stage; a cut
stage leaves the epochs it finished.

Ultralytics is a benchmark peer, never a dependency: run where it is installed, with the
workspace sources and ``tools/`` on the path (GPU machine)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):tools python3 tools/bench_pose_finetune.py \\
        --budget-s 140 --pretrain-s 50 --epochs 8

A CPU smoke run (minutes; numbers meaningless)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):tools /tmp/ulvenv/bin/python \\
        tools/bench_pose_finetune.py --device cpu --images 16 --imgsz 128 --batch 8 \\
        --workers 0 --pretrain-s 10 --epochs 1 --budget-s 600
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LUCID_POSE = "val/pose/mAP50-95"
REFERENCE_POSE = "metrics/mAP50-95(P)"
RESULT = "pose_finetune.json"
DATA_SEEDS = {"A": 1, "B": 2}
PRETRAIN_GRACE_S = 25.0
"""Seconds the pretraining may run past ``--pretrain-s`` (start-up, last epoch, evaluations)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--role",
        default="all",
        choices=[
            "all",
            "data",
            "pretrain",
            "lucid",
            "ultralytics",
            "cross-lucid",
            "cross-ultralytics",
        ],
    )
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-pose-finetune"))
    parser.add_argument("--device", default="0", help="'0' (first CUDA device) or 'cpu'")
    parser.add_argument("--images", type=int, default=256, help="train images per set")
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument(
        "--pretrain-s",
        type=float,
        default=50.0,
        help="Ultralytics' training time on set A, seconds (its `time`)",
    )
    parser.add_argument("--epochs", type=int, default=8, help="fine-tune epochs on set B")
    parser.add_argument("--warmup-epochs", type=float, default=1.0)
    parser.add_argument("--close-mosaic", type=int, default=2)
    parser.add_argument(
        "--grad-clip-norm",
        type=float,
        nargs="+",
        default=[10.0],
        help="lucid-yolo fine-tunes, one per value (0: no clip)",
    )
    parser.add_argument(
        "--optimizer",
        nargs="+",
        default=["auto", "MuSGD"],
        help="Ultralytics fine-tunes, one per value",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=140.0,
        help="wall-clock budget of --role all; the fine-tunes are cut to fit",
    )
    parser.add_argument("--name", default="", help="run name (the fine-tune roles)")
    parser.add_argument("--weights", type=Path, help="checkpoint (the fine-tune and cross roles)")
    return parser


# ----------------------------------------------------------------------------- roles


def make_data(args: argparse.Namespace) -> None:
    """Set ``--name`` (``A`` or ``B``) with its own seed (``--role data``)."""
    from lucid_yolo.train.data.synthetic import generate_synthetic

    generate_synthetic(
        args.root / args.name,
        task="pose",
        num_train=args.images,
        num_val=64,
        imgsz=args.imgsz,
        seed=DATA_SEEDS[args.name],
    )


def pretrain(args: argparse.Namespace) -> dict[str, Any]:
    """Ultralytics on A for ``--pretrain-s`` seconds; its own evaluation of the result on B."""
    from ultralytics import YOLO

    started = time.perf_counter()
    model = YOLO("yolo26n-pose.yaml")
    model.train(
        **_reference_args(args, "A", "pretrain"),
        epochs=100,
        time=args.pretrain_s / 3600.0,
        optimizer="auto",
    )
    weights = args.root / "ul" / "pretrain" / "weights" / "last.pt"
    trained = time.perf_counter() - started
    start_on_b = YOLO(weights).val(
        data=str(args.root / "B" / "data.yaml"),
        imgsz=args.imgsz,
        batch=args.batch,
        device=args.device,
        plots=False,
        project=str(args.root / "ul"),
        name="pretrain-val-B",
        exist_ok=True,
    )
    return {
        "weights": str(weights),
        "seconds": round(trained, 1),
        "reference_pose_on_B": round(float(start_on_b.results_dict[REFERENCE_POSE]), 4),
    }


def fine_tune_lucid(args: argparse.Namespace, clip: float) -> dict[str, Any]:
    """lucid-yolo fine-tunes B from ``--weights``: its evaluator before and after every epoch;
    the EMA after every epoch saved under the reference's names for the cross evaluation."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import Callback

    from lucid_yolo.models import save_reference_weights
    from lucid_yolo.train import YoloDataModule, YoloModule

    export = args.root / "lucid" / args.name / "last.pt"
    export.parent.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"grad_clip_norm": clip, "pose": [], "box": []}

    class Record(Callback):
        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            metrics = trainer.callback_metrics
            record["pose"].append(round(float(metrics[LUCID_POSE]), 4))
            record["box"].append(round(float(metrics["val/box/mAP50-95"]), 4))
            if trainer.state.fn == "fit":
                save_reference_weights(pl_module.ema_net, export)
                record["exported_epochs"] = len(record["pose"]) - 1
            _write_role(args, record)

    pl.seed_everything(0)
    data = YoloDataModule(
        args.root / "B" / "data.yaml",
        task="pose",
        imgsz=args.imgsz,
        batch_size=args.batch,
        workers=args.workers,
        close_mosaic=args.close_mosaic,
    )
    module = YoloModule(
        "yolo26n-pose",
        num_classes=data.num_classes,
        kpt_shape=_kpt_shape(data),
        weights=str(args.weights),
        warmup_epochs=args.warmup_epochs,
        warmup_min_steps=0,
        grad_clip_norm=clip,
    )
    trainer = pl.Trainer(
        accelerator="cpu" if args.device == "cpu" else "gpu",
        devices=1,
        precision="32-true",
        max_epochs=args.epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[Record()],
    )
    trainer.validate(module, data, verbose=False)
    trainer.fit(module, data)
    return record


def fine_tune_reference(args: argparse.Namespace, optimizer: str) -> dict[str, Any]:
    """Ultralytics fine-tunes B from ``--weights``: its evaluator after every epoch."""
    from ultralytics import YOLO

    YOLO(args.weights).train(
        **_reference_args(args, "B", args.name), epochs=args.epochs, optimizer=optimizer
    )
    return {"optimizer": optimizer, "pose": _reference_curve(args.root / "ul" / args.name)}


def cross_lucid(args: argparse.Namespace) -> dict[str, Any]:
    """lucid-yolo's evaluator on an Ultralytics checkpoint (``--weights``), set B."""
    import lightning.pytorch as pl

    from lucid_yolo.train import YoloDataModule, YoloModule

    data = YoloDataModule(
        args.root / "B" / "data.yaml",
        task="pose",
        imgsz=args.imgsz,
        batch_size=args.batch,
        workers=args.workers,
    )
    module = YoloModule(
        "yolo26n-pose",
        num_classes=data.num_classes,
        kpt_shape=_kpt_shape(data),
        weights=str(args.weights),
    )
    trainer = pl.Trainer(
        accelerator="cpu" if args.device == "cpu" else "gpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    (metrics,) = trainer.validate(module, data, verbose=False)
    return {"weights": str(args.weights), "lucid_pose": round(float(metrics[LUCID_POSE]), 4)}


def cross_reference(args: argparse.Namespace) -> dict[str, Any]:
    """Ultralytics' evaluator on lucid-yolo's exported weights (``--weights``, reference names)
    inside the pretrained checkpoint's network (the flow is not used in evaluation)."""
    import torch
    from ultralytics import YOLO

    model = YOLO(args.root / "ul" / "pretrain" / "weights" / "last.pt")
    state = torch.load(args.weights, map_location="cpu", weights_only=True)
    missing, unexpected = model.model.load_state_dict(state, strict=False)
    if unexpected or any("flow_model" not in key for key in missing):
        raise SystemExit(f"not a lucid-yolo export of this network: {missing=} {unexpected=}")
    metrics = model.val(
        data=str(args.root / "B" / "data.yaml"),
        imgsz=args.imgsz,
        batch=args.batch,
        device=args.device,
        plots=False,
        project=str(args.root / "ul"),
        name=f"cross-{args.name}",
        exist_ok=True,
    )
    return {
        "weights": str(args.weights),
        "reference_pose": round(float(metrics.results_dict[REFERENCE_POSE]), 4),
    }


# ----------------------------------------------------------------------------- helpers


def _kpt_shape(data: Any) -> tuple[int, int]:
    shape = data.spec.kpt_shape
    return (int(shape[0]), int(shape[1]))


def _reference_args(args: argparse.Namespace, dataset: str, name: str) -> dict[str, Any]:
    return {
        "data": str(args.root / dataset / "data.yaml"),
        "imgsz": args.imgsz,
        "batch": args.batch,
        "device": args.device,
        "workers": args.workers,
        "project": str(args.root / "ul"),
        "name": name,
        "exist_ok": True,
        "plots": False,
        "seed": 0,
        "amp": False,
        "warmup_epochs": args.warmup_epochs,
        "close_mosaic": args.close_mosaic,
    }


def _reference_curve(run: Path) -> list[float]:
    path = run / "results.csv"
    if not path.exists():
        return []
    with path.open() as file:
        rows = [{k.strip(): v.strip() for k, v in row.items()} for row in csv.DictReader(file)]
    return [round(float(row[REFERENCE_POSE]), 4) for row in rows]


def _write_role(args: argparse.Namespace, record: dict[str, Any]) -> None:
    path = args.root / "roles" / f"{args.role}-{args.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def _run_role(args: argparse.Namespace) -> None:
    if args.role == "data":
        make_data(args)
        return
    result: dict[str, Any]
    if args.role == "pretrain":
        result = pretrain(args)
    elif args.role == "lucid":
        result = fine_tune_lucid(args, args.grad_clip_norm[0])
    elif args.role == "ultralytics":
        result = fine_tune_reference(args, args.optimizer[0])
    elif args.role == "cross-lucid":
        result = cross_lucid(args)
    else:
        result = cross_reference(args)
    _write_role(args, result)


# ----------------------------------------------------------------------------- orchestration


def _spawn(
    args: argparse.Namespace,
    role: str,
    name: str = "",
    weights: Path | None = None,
    extra: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-u", __file__, "--role", role, "--name", name, *extra]
    for flag in (
        "root",
        "device",
        "images",
        "imgsz",
        "batch",
        "workers",
        "pretrain_s",
        "epochs",
        "warmup_epochs",
        "close_mosaic",
    ):
        command += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    if weights is not None:
        command += ["--weights", str(weights)]
    log = (args.root / "logs" / f"{role}-{name or role}.log").open("w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)


def _wait(processes: list[subprocess.Popen[bytes]], deadline: float) -> list[int | None]:
    codes: list[int | None] = []
    for process in processes:
        try:
            codes.append(process.wait(timeout=max(deadline - time.monotonic(), 0.1)))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            codes.append(None)
    return codes


def _read_role(args: argparse.Namespace, role: str, name: str = "") -> dict[str, Any]:
    path = args.root / "roles" / f"{role}-{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    """Every stage within ``--budget-s``: data, pretrain, the fine-tunes together, the cross
    evaluations together; the result file is rewritten after each stage."""
    started = time.monotonic()
    budget_end = started + args.budget_s
    (args.root / "logs").mkdir(parents=True, exist_ok=True)
    out = Path(os.environ.get("OUT") or args.root)
    result: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()}, "stages": {}}

    def stage(name: str, codes: list[int | None]) -> None:
        result["stages"][name] = {"exit": codes, "at_s": round(time.monotonic() - started, 1)}
        (out / RESULT).write_text(json.dumps(result, indent=1))

    stage("data", _wait([_spawn(args, "data", name) for name in DATA_SEEDS], budget_end))
    # Ultralytics checks its time only at an epoch's end, then validates: past a grace period
    # the pretraining is stopped, and its last epoch's last.pt is the checkpoint.
    pretrain_end = min(budget_end, time.monotonic() + args.pretrain_s + PRETRAIN_GRACE_S)
    stage("pretrain", _wait([_spawn(args, "pretrain")], pretrain_end))
    result["pretrain"] = _read_role(args, "pretrain")
    result["pretrain"]["reference_pose_on_A"] = _reference_curve(args.root / "ul" / "pretrain")
    weights = args.root / "ul" / "pretrain" / "weights" / "last.pt"
    lucid = {f"lucid-clip{clip:g}": ("--grad-clip-norm", str(clip)) for clip in args.grad_clip_norm}
    reference = {f"ul-{optimizer}": ("--optimizer", optimizer) for optimizer in args.optimizer}
    cross_reserve = min(25.0, max(budget_end - time.monotonic(), 0.0) / 4)
    fine_tunes = [_spawn(args, "lucid", name, weights, extra) for name, extra in lucid.items()]
    fine_tunes += [
        _spawn(args, "ultralytics", name, weights, extra) for name, extra in reference.items()
    ]
    stage("fine-tune", _wait(fine_tunes, budget_end - cross_reserve))
    result["lucid"] = {name: _read_role(args, "lucid", name) for name in lucid}
    result["ultralytics"] = {name: _read_role(args, "ultralytics", name) for name in reference}
    for name in reference:
        result["ultralytics"][name]["pose"] = _reference_curve(args.root / "ul" / name)
    crosses = [
        _spawn(args, "cross-lucid", name, args.root / "ul" / name / "weights" / "last.pt")
        for name in reference
    ]
    crosses += [
        _spawn(args, "cross-ultralytics", name, args.root / "lucid" / name / "last.pt")
        for name in lucid
    ]
    stage("cross", _wait(crosses, budget_end))
    result["cross"] = {name: _read_role(args, "cross-lucid", name) for name in reference}
    result["cross"].update({name: _read_role(args, "cross-ultralytics", name) for name in lucid})
    stage("done", [])
    return result


def main() -> None:
    args = _parser().parse_args()
    if args.role != "all":
        _run_role(args)
        return
    result = orchestrate(args)
    print(json.dumps({k: v for k, v in result.items() if k != "settings"}, indent=1), flush=True)


if __name__ == "__main__":
    main()
