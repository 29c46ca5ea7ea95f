"""Whole fits side by side: Ultralytics against `lucid-yolo fit`, native and replayed.

The user's number is the whole fit with validation, from process start to exit, so every run is a
fresh process: the caching allocator keeps reservations from one fit to the next inside a process,
which would make peak memory meaningless. Runs alternate (the order rotates with each repeat) on the
same synthetic set, epochs, batch and image size. Each tool runs with its own defaults otherwise:
lucid-yolo through its packaged ``<task>-n`` config, Ultralytics through ``yolo26n<suffix>.yaml``
from scratch with ``plots=False`` (its plots need a font download, and the GPU machine is offline).

Ultralytics is a benchmark peer carried as wheels to the GPU machine; no package depends on it.

Reported per task and tool: median and range of the whole-fit seconds, training images/s,
validation seconds, start-up seconds, peak reserved CUDA memory, the tool's own final mAP50-95, and
for lucid-yolo the per-phase step times (data wait, network, loss, backward, update) and the share
of each epoch spent outside training steps.

Every fit also keeps its per-epoch validation metrics (lucid-yolo through
``epoch_metrics_probe.EpochMetrics``, Ultralytics from its ``results.csv``), read back even when a
fit is cut by ``--timeout``. ``--lucid-args`` appends flags to every lucid-yolo fit (for example
``--lucid-args="--model.grad_clip_norm 0"``: with ``=``, since the value starts with dashes).
Each lucid-yolo record's ``memory_marks`` says where its peak reserved memory was set
(:class:`bench_probe.FitProbe`); ``--memory-history N`` adds ``memory_peaks``, the blocks alive
at the peaks by allocation site, and voids the times (such a call's runs merge with no other).

``--own-environments DIR`` runs each tool from a virtual environment of its own dependency
closure (``dependency_closure.py``: lucid-yolo's packages' requirements, or Ultralytics'), linked
from the machine's installed libraries, as a user who installs the tool into a fresh environment
would have it: the GPU image's other libraries (transformers, scipy, torchvision, which
torchmetrics imports whenever it finds them) no longer load into either tool's process. Each
environment's record (distributions, versions, what was missing) goes into the report.

Before the first timed fit the tool warms the machine for both tools alike (``--no-warm-up`` skips
it): one untimed process imports torch, initialises CUDA and imports both trainers, so the first
fit of a call does not pay alone for reading the libraries from a cold disk. With
``--bytecode-cache DIR`` every process (the warm-up and each fit) keeps compiled bytecode under
``DIR`` (``PYTHONPYCACHEPREFIX``, and ``PYTHONDONTWRITEBYTECODE`` dropped), and the warm-up compiles
every module on the import path into it first: an installed package has its bytecode, but the GPU
machine's environment sets ``PYTHONDONTWRITEBYTECODE=1`` over sources without any, so without the
cache each process would compile some two thousand modules before its first line of work.

``--accuracy`` is the accuracy side-by-side of issue 13: every fit starts at once, Ultralytics on
the first visible GPU and lucid-yolo on the second (when there are two), the loader workers split
over the CPU cores, and the report is each tool's mAP50-95 of every metric kind at its last epoch
(box; mask for segment, keypoint OKS for pose, rotated box for OBB) with the per-epoch task metric.
Times of such a run are void (the fits share GPUs and cores).

Example (GPU machine, repository root, wheels installed as the device README says)::

    export PYTHONPATH=$(ls -d packages/*/src | paste -sd:) YOLO_OFFLINE=1
    python3 tools/bench_side_by_side.py \\
        --tasks detect --batch 16 --epochs 30 --tools ultralytics,replay,native --out $OUT

The accuracy table on a two-GPU machine (four tasks, both tools, 320 px, 30 epochs)::

    python3 tools/bench_side_by_side.py --accuracy --tasks detect,segment,pose,obb \\
        --tools ultralytics,native --imgsz 320 --batch 16 --epochs 30 --timeout 500 \\
        --runs-dir /tmp/acc-runs --out $OUT
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from row_replay import ROW_REPLAY, replay_flags

if TYPE_CHECKING:
    from lucid_yolo.train.data.dataset_yaml import Task

BETWEEN_KEY = "between_steps_ms"
"""``PhaseTimer``'s span between two steps (``lucid_yolo.train.callbacks.BETWEEN_STEPS``), as the
probe reads it; kept apart here so that this process imports neither trainer."""

TOOLS_DIR = Path(__file__).resolve().parent
SOURCES = sorted((TOOLS_DIR.parent / "packages").glob("*/src"))
"""lucid-yolo's packages, run from source."""
SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}
PRIMARY_KIND = {"detect": "box", "segment": "mask", "pose": "pose", "obb": "obb"}
"""The metric kind whose mAP50-95 is the task's primary number (lucid-yolo's fitness)."""
ULTRALYTICS_KINDS = {
    "detect": {"B": "box"},
    "segment": {"B": "box", "M": "mask"},
    "pose": {"B": "box", "P": "pose"},
    "obb": {"B": "obb"},
}
"""Ultralytics' metric suffixes per task and the lucid-yolo kind each one is (OBB's ``B`` is the
rotated box)."""


def synthetic_set(root: Path, task: Task, images: int, val_images: int, imgsz: int) -> Path:
    """The benchmark's synthetic set under ``root`` (its YAML), rendered only when missing.

    Rendering 640 images at 640 px takes about 20 s on the GPU machine, in every row of a device
    call; the set is a function of its folder's name (seed 0), and its YAML is written last, so a
    folder with a YAML holds the whole set.
    """
    from lucid_yolo.train.data.synthetic import generate_synthetic

    folder = root / f"{task}-{images}-{val_images}-{imgsz}"
    if (folder / "data.yaml").is_file():
        return folder / "data.yaml"
    return generate_synthetic(
        folder, task=task, num_train=images, num_val=val_images, imgsz=imgsz, seed=0
    )


# --------------------------------------------------------------------------- one Ultralytics fit


def ultralytics_worker(spec: dict[str, Any]) -> None:
    """Run one Ultralytics fit in this process and write what it measured to ``spec["probe"]``."""
    import torch
    from ultralytics import YOLO

    marks: dict[str, Any] = {"first_batch": 0.0, "val_s": 0.0, "val_runs": 0, "batches": 0}
    marks["epoch_marks"] = []
    marks["last_epoch_metrics"] = {}

    def first_batch(_: Any) -> None:
        if not marks["first_batch"]:
            marks["first_batch"] = time.time()

    def batch_end(_: Any) -> None:
        marks["batches"] += 1

    def epoch_start(_: Any) -> None:
        marks["epoch_marks"].append(time.time())

    def val_start(_: Any) -> None:
        marks["val_start"] = time.time()

    def val_end(_: Any) -> None:
        marks["val_s"] += time.time() - marks["val_start"]
        marks["val_runs"] += 1

    def fit_epoch_end(trainer: Any) -> None:
        marks["last_epoch_metrics"] = {
            k: float(v) for k, v in trainer.metrics.items() if "mAP" in k
        }

    model = YOLO(f"yolo26n{SUFFIX[spec['task']]}.yaml")
    for event, hook in (
        ("on_train_batch_start", first_batch),
        ("on_train_batch_end", batch_end),
        ("on_train_epoch_start", epoch_start),
        ("on_val_start", val_start),
        ("on_val_end", val_end),
        ("on_fit_epoch_end", fit_epoch_end),
    ):
        model.add_callback(event, hook)
    model.train(
        data=spec["data"],
        epochs=spec["epochs"],
        batch=spec["batch"],
        imgsz=spec["imgsz"],
        device=spec["device"],
        project=spec["run_dir"],
        name="train",
        exist_ok=True,
        plots=False,
        seed=0,
        **({"cache": "ram"} if spec["cache"] else {}),
        **({"workers": spec["workers"]} if spec["workers"] is not None else {}),
    )
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    end = time.time()
    first = marks["first_batch"] or end
    train_s = end - first - marks["val_s"]
    images = marks["batches"] * spec["batch"]
    record = {
        "startup_s": first - spec["spawned"],
        "train_s": train_s,
        "val_s": marks["val_s"],
        "val_runs": marks["val_runs"],
        "train_images": images,
        "train_img_per_s": images / train_s if train_s > 0 else 0.0,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30
        if torch.cuda.is_available()
        else 0.0,
        "metrics_last_epoch": marks["last_epoch_metrics"],
        "metrics": {k: float(v) for k, v in model.trainer.metrics.items() if "mAP" in k},
    }
    Path(spec["probe"]).write_text(json.dumps(record, indent=2))


# --------------------------------------------------------------------------- orchestration


def lucid_fit_arguments(
    task: str,
    data: Path,
    run_dir: Path,
    *,
    batch: int,
    imgsz: int,
    epochs: int,
    replay: bool,
    cpu: bool,
) -> list[str]:
    """The ``lucid-yolo fit`` arguments of a measured fit, without any probe: the packaged
    ``<task>-n`` config, the run's data, batch, size and epochs, no progress bar, every replay
    region of the task when ``replay`` (``tools/profile_startup.py`` shares them)."""
    command = [
        "--config", f"{task}-n",
        "--data.yaml", str(data),
        "--data.batch_size", str(batch),
        "--data.imgsz", str(imgsz),
        "--trainer.max_epochs", str(epochs),
        "--trainer.default_root_dir", str(run_dir),
        "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip
    if replay:
        command += replay_flags(ROW_REPLAY)
    if cpu:
        command += ["--trainer.accelerator", "cpu"]
    return command


def _lucid_command(
    task: str, tool: str, data: Path, args: argparse.Namespace, run_dir: Path
) -> list[str]:
    command = [
        tool_python(tool, args), "-m", "lucid_yolo.cli", "fit",
        *lucid_fit_arguments(
            task, data, run_dir, batch=args.batch, imgsz=args.imgsz, epochs=args.epochs,
            replay=tool == "replay", cpu=args.device == "cpu",
        ),
        "--trainer.callbacks+=bench_probe.FitProbe",
        "--trainer.callbacks+=epoch_metrics_probe.EpochMetrics",
    ]  # fmt: skip
    if args.workers is not None:
        command += ["--data.workers", str(args.workers)]
    return command + shlex.split(args.lucid_args)


def _visible_device(index: int) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry of this process's ``index``-th visible GPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        devices = [d.strip() for d in visible.split(",") if d.strip()]
        return devices[min(index, len(devices) - 1)]
    return str(index)


def _epoch_metrics(task: str, tool: str, run_dir: Path, epochs_file: Path) -> list[dict[str, Any]]:
    """``[{"epoch": e, "fit_s": seconds, "<kind>": mAP50-95, ...}]`` per validation, epochs from 0.

    Read from the files each tool writes as it goes, so a fit cut by the timeout keeps its
    finished epochs.
    """
    rows: list[dict[str, Any]] = []
    if tool == "ultralytics":
        results = run_dir / "train" / "results.csv"
        if not results.exists():
            return rows
        with results.open() as file:
            for raw in csv.DictReader(file):
                line = {k.strip(): v.strip() for k, v in raw.items() if k}
                row: dict[str, Any] = {
                    "epoch": int(float(line["epoch"])) - 1,
                    "fit_s": float(line["time"]) if line.get("time") else None,
                }
                for suffix, kind in ULTRALYTICS_KINDS[task].items():
                    value = line.get(f"metrics/mAP50-95({suffix})")
                    if value:
                        row[kind] = float(value)
                rows.append(row)
        return rows
    if not epochs_file.exists():
        return rows
    for text in epochs_file.read_text().splitlines():
        if text.strip():
            record = json.loads(text)
            row = {"epoch": int(record["epoch"]), "fit_s": record.get("fit_s")}
            for key, value in record.items():
                parts = key.split("/")
                if len(parts) == 3 and parts[0] == "val" and parts[2] == "mAP50-95":
                    row[parts[1]] = float(value)
            rows.append(row)
    return rows


ENVIRONMENTS = {"ultralytics": "ultralytics", "replay": "lucid", "native": "lucid"}
"""The dependency closure each tool runs in under ``--own-environments``."""


def own_environments(tools: list[str], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Build the closure environment of every tool of the run; their records by name."""
    from dependency_closure import ClosureError, environment_for

    records: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(ENVIRONMENTS[tool] for tool in tools):
        roots, projects = (
            (["ultralytics"], [])
            if name == "ultralytics"
            else ([], [source.parent for source in SOURCES])
        )
        try:
            records[name] = environment_for(
                args.own_environments / name, roots, projects, dict(args.substitute)
            )
        except ClosureError as error:
            raise SystemExit(f"--own-environments: the {name} environment: {error}") from error
    return records


def tool_python(tool: str, args: argparse.Namespace) -> str:
    """The interpreter a tool's processes run: its own environment's, or this one."""
    if args.own_environments is None:
        return sys.executable
    return str(args.environments[ENVIRONMENTS[tool]]["python"])


def child_environment(args: argparse.Namespace, tool: str) -> dict[str, str]:
    """The environment of a tool's processes: tools on the path, the bytecode cache.

    In a tool's own environment the path holds only the tools and, for lucid-yolo, its sources:
    nothing of the libraries this process found through ``PYTHONPATH``.
    """
    env = dict(os.environ)
    if args.own_environments is None:
        inherited = [env.get("PYTHONPATH", "")]
    else:
        inherited = [] if tool == "ultralytics" else [str(source) for source in SOURCES]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TOOLS_DIR), *inherited]))
    if args.bytecode_cache is not None:
        env["PYTHONPYCACHEPREFIX"] = str(args.bytecode_cache)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


WARM_UP_IMPORTS = {
    "ultralytics": "import ultralytics",
    "replay": "import lightning.pytorch, lucid_yolo.train",
    "native": "import lightning.pytorch, lucid_yolo.train",
}
"""What the warm-up process imports for each tool of the run."""


def warm_up(tools: list[str], args: argparse.Namespace) -> float:
    """Warm the machine for every tool alike before the first timed fit; returns its seconds.

    With ``--bytecode-cache`` it first compiles every module on the child's import path into the
    cache (``compileall`` over all cores). Then one process imports torch, initialises CUDA (when
    the run uses it) and imports each tool's trainer, which reads their libraries into the page
    cache.
    """
    started = time.time()
    cuda = "torch.zeros(1, device='cuda')" if args.device == "cuda" else "None"
    by_python: dict[str, list[str]] = {}
    for tool in (t for t in tools if t in WARM_UP_IMPORTS):
        by_python.setdefault(tool_python(tool, args), []).append(tool)
    for python, group in by_python.items():
        env = child_environment(args, group[0])
        if args.bytecode_cache is not None:
            paths = subprocess.run(
                [python, "-c", "import sys; print('\\n'.join(sys.path))"],
                env=env, capture_output=True, text=True, check=True,
            ).stdout.split()  # fmt: skip
            subprocess.run(
                [python, "-m", "compileall", "-q", "-j", "0", *compile_folders(paths)],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
            )  # fmt: skip
        imports = "; ".join(dict.fromkeys(WARM_UP_IMPORTS[t] for t in group))
        subprocess.run([python, "-c", f"import torch; {cuda}; {imports}"], env=env, check=True)
    return time.time() - started


def compile_folders(paths: list[str]) -> list[str]:
    """The folders of an import path, and every linked folder inside them.

    ``compileall`` does not descend into a symbolic link, and a closure environment's
    site-packages holds nothing else; given each link itself, it compiles under the path the
    importer will use, which is the one the bytecode cache is keyed by.
    """
    folders: list[str] = []
    for path in dict.fromkeys(paths):
        folder = Path(path)
        if not folder.is_dir():
            continue
        folders.append(path)
        folders += sorted(str(e) for e in folder.iterdir() if e.is_symlink() and e.is_dir())
    return folders


def run_one(
    task: str, tool: str, data: Path, args: argparse.Namespace, index: int
) -> dict[str, Any]:
    """One fit in a fresh process; returns the probe's record plus the parent's wall time."""
    run_dir = args.runs_dir / f"{task}-{tool}-{index}"
    probe = args.runs_dir / f"{task}-{tool}-{index}.json"
    epochs_file = args.runs_dir / f"{task}-{tool}-{index}.epochs.jsonl"
    run_dir.mkdir(parents=True, exist_ok=True)
    epochs_file.unlink(missing_ok=True)
    spawned = time.time()
    env = child_environment(args, tool)
    env.update(LUCID_BENCH_PROBE=str(probe), LUCID_BENCH_SPAWN=repr(spawned))
    env["LUCID_EPOCH_METRICS"] = str(epochs_file)
    env.pop("LUCID_BENCH_MEMORY_HISTORY", None)
    if args.memory_history and tool != "ultralytics":
        env["LUCID_BENCH_MEMORY_HISTORY"] = str(args.memory_history)
    if args.split_gpus:
        env["CUDA_VISIBLE_DEVICES"] = _visible_device(0 if tool == "ultralytics" else 1)
    if tool == "ultralytics":
        spec = {
            "task": task, "data": str(data), "epochs": args.epochs, "batch": args.batch,
            "imgsz": args.imgsz, "device": 0 if args.device == "cuda" else "cpu",
            "run_dir": str(run_dir), "probe": str(probe), "spawned": spawned,
            "cache": args.ultralytics_cache, "workers": args.workers,
        }  # fmt: skip
        command = [
            tool_python(tool, args),
            str(Path(__file__).resolve()),
            "--ultralytics-worker",
            json.dumps(spec),
        ]
    else:
        command = _lucid_command(task, tool, data, args, run_dir)
    log = (args.runs_dir / f"{task}-{tool}-{index}.log").open("w")
    try:
        code = subprocess.run(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout
        ).returncode
    except subprocess.TimeoutExpired:
        code = -1
    whole = time.time() - spawned
    record: dict[str, Any] = {
        "task": task,
        "tool": tool,
        "repeat": index,
        "exit": code,
        "whole_s": whole,
    }
    if probe.exists():
        record.update(json.loads(probe.read_text()))
    record["epoch_metrics"] = _epoch_metrics(task, tool, run_dir, epochs_file)
    if code != 0:
        lines = (args.runs_dir / f"{task}-{tool}-{index}.log").read_text(errors="replace")
        record["log_tail"] = lines.splitlines()[-5:]
    return record


def _median_range(values: list[float]) -> dict[str, float]:
    return (
        {"median": statistics.median(values), "min": min(values), "max": max(values)}
        if values
        else {}
    )


def _primary_map(record: dict[str, Any]) -> float | None:
    """The task's primary mAP50-95 at the fit's last validation (``None`` before any)."""
    epochs = record.get("epoch_metrics") or []
    return epochs[-1].get(PRIMARY_KIND[record["task"]]) if epochs else None


def _lucid_shares(record: dict[str, Any]) -> dict[str, Any]:
    """Data-wait share of a step, the share of an epoch outside steps and, where the fit logged
    it, the share of a step's period the device spends between steps (``PhaseTimer``'s
    ``between_steps``: the batch's copy, the device's pixel work and any wait for the host) and
    where the time outside steps went (``outside_split_s``, the probe's spans), last half of
    the fit."""
    phases = [p for p in record.get("phases_ms", []) if p]
    epochs = record.get("epochs", [])
    if not phases or not epochs:
        return {}
    half = phases[len(phases) // 2 :]
    names = sorted({k for p in half for k in p if k.endswith("_ms") and k != BETWEEN_KEY})
    step = {name: statistics.median(p.get(name, 0.0) for p in half) for name in names}
    step_ms = sum(step.values())
    tail = epochs[len(epochs) // 2 :]
    outside = [1 - e["steps"] * step_ms / 1000 / e["wall_s"] for e in tail if e["wall_s"] > 0]
    shares: dict[str, Any] = {
        **{f"step_{k}": v for k, v in step.items()},
        "step_ms": step_ms,
        "data_share": step.get("data_ms", 0.0) / step_ms if step_ms else 0.0,
        "outside_share": statistics.median(outside) if outside else 0.0,
    }
    betweens = [p[BETWEEN_KEY] for p in half if BETWEEN_KEY in p]
    if betweens:
        between = statistics.median(betweens)
        period = step_ms - step.get("data_ms", 0.0) + between
        shares[f"step_{BETWEEN_KEY}"] = between
        shares["between_share"] = between / period if period > 0 else 0.0
    split = _outside_split(record.get("outside_split") or [])
    if split:
        shares["outside_split_s"] = split
    return shares


def _outside_split(passes: list[dict[str, float]]) -> dict[str, float]:
    """Medians of ``FitProbe``'s spans outside the steps over the later half of the validation
    passes, each over the passes that have it (the fit's last has no ``after_validation_s``)."""
    later = passes[len(passes) // 2 :]
    names = dict.fromkeys(name for split in later for name in split)
    return {name: statistics.median(s[name] for s in later if name in s) for name in names}


def summarise(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (task, tool): medians and ranges, and the speed-up against Ultralytics."""
    rows: list[dict[str, Any]] = []
    for task in dict.fromkeys(r["task"] for r in records):
        reference = None
        for tool in dict.fromkeys(r["tool"] for r in records if r["task"] == task):
            done = [
                r for r in records if r["task"] == task and r["tool"] == tool and r["exit"] == 0
            ]
            row: dict[str, Any] = {"task": task, "tool": tool, "runs": len(done)}
            for key in ("whole_s", "train_img_per_s", "val_s", "startup_s", "peak_reserved_gib"):
                row[key] = _median_range([float(r[key]) for r in done if key in r])
            maps = [m for m in (_primary_map(r) for r in done) if m is not None]
            row["mAP50-95"] = statistics.median(maps) if maps else None
            if tool != "ultralytics" and done:
                row["phases"] = _lucid_shares(done[-1])
            if tool == "ultralytics":
                reference = row["whole_s"].get("median")
            rows.append(row)
        for row in rows:
            if row["task"] == task and reference and row["whole_s"]:
                row["speedup_vs_ultralytics"] = reference / row["whole_s"]["median"]
    return rows


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """The Markdown table of the Benchmarks page."""
    lines = [
        f"batch {args.batch}, {args.epochs} epochs, {args.imgsz} px, "
        f"{args.images}/{args.val_images} images"
        + (
            "; **times void**: the lucid-yolo fits recorded the allocator's history"
            if getattr(args, "memory_history", 0)
            else ""
        )
        + (
            "; each tool in a fresh environment of its own dependency closure"
            if getattr(args, "own_environments", None) is not None
            else "; both tools in the machine's environment"
        ),
        "",
        "| task | tool | runs | whole fit s (range) | × Ultralytics | train img/s | val s "
        "| start-up s | peak reserved GiB | mAP50-95 | step ms: data wait (host, device), "
        "outside steps |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        whole = row["whole_s"]

        def med(key: str, fmt: str = ".1f", row: dict[str, Any] = row) -> str:
            value = row[key].get("median")
            return "—" if value is None else format(value, fmt)

        span = (
            f"{whole['median']:.1f} ({whole['min']:.1f}–{whole['max']:.1f})" if whole else "failed"
        )
        speed = row.get("speedup_vs_ultralytics")
        metric = row["mAP50-95"]
        lines.append(
            f"| {row['task']} | {row['tool']} | {row['runs']} | {span} | "
            f"{'—' if speed is None else f'{speed:.2f}×'} | {med('train_img_per_s')} | "
            f"{med('val_s')} | "
            f"{med('startup_s')} | {med('peak_reserved_gib', '.2f')} | "
            f"{'—' if metric is None else f'{metric:.3f}'} | {_step_shares(row)} |"
        )
    return "\n".join(lines)


def _step_shares(row: dict[str, Any]) -> str:
    """``"18.3: 11.6 %, 4.1 %; 7.4 %"``: a lucid-yolo row's step (``PhaseTimer``'s phases), its
    data wait on the host and between steps on the device, and the epoch outside steps (the
    last fit's second half; ``—`` where not logged)."""
    shares = row.get("phases")
    if not shares:
        return "—"
    between = shares.get("between_share")
    device = "—" if between is None else f"{100 * between:.1f} %"
    return (
        f"{shares['step_ms']:.1f}: {100 * shares['data_share']:.1f} %, {device}; "
        f"{100 * shares['outside_share']:.1f} %"
    )


def _reached(row: dict[str, Any]) -> str:
    """``"30 (212 s)"``: epochs validated and the fit's seconds at the last validation."""
    if "epoch" not in row:
        return "—"
    seconds = row.get("fit_s")
    return f"{row['epoch'] + 1}" + ("" if seconds is None else f" ({seconds:.0f} s)")


def accuracy_table(records: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """Each tool's mAP50-95 per metric kind at its last epoch, then the task metric per epoch."""
    tools = list(dict.fromkeys(r["tool"] for r in records))
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:
        epochs = record.get("epoch_metrics") or []
        if epochs:
            last[record["task"], record["tool"]] = epochs[-1]
    lines = [
        f"mAP50-95 at each fit's last validation, each tool's own evaluator: batch {args.batch}, "
        f"{args.epochs} epochs, {args.imgsz} px, {args.images}/{args.val_images} images"
        + (f", lucid-yolo flags `{args.lucid_args}`" if args.lucid_args else ""),
        "",
        "| task | metric | " + " | ".join(tools) + " | epochs reached (fit s) |",
        "|---|---|" + "---|" * len(tools) + "---|",
    ]
    for task in dict.fromkeys(r["task"] for r in records):
        kinds = dict.fromkeys(
            kind
            for tool in tools
            for kind in last.get((task, tool), {})
            if kind not in ("epoch", "fit_s")
        )
        for kind in kinds:
            values = [last.get((task, tool), {}).get(kind) for tool in tools]
            reached = [_reached(last.get((task, tool), {})) for tool in tools]
            lines.append(
                f"| {task} | {kind} | "
                + " | ".join("—" if v is None else f"{v:.3f}" for v in values)
                + " | "
                + " / ".join(reached)
                + " |"
            )
    columns = [(r["task"], r["tool"]) for r in records]
    by_column = {(r["task"], r["tool"]): r.get("epoch_metrics") or [] for r in records}
    longest = max((len(rows) for rows in by_column.values()), default=0)
    lines += [
        "",
        "Task metric (" + ", ".join(f"{t}: {k}" for t, k in PRIMARY_KIND.items()) + ") per epoch:",
        "",
        "| epoch | " + " | ".join(f"{task} {tool}" for task, tool in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for epoch in range(longest):
        cells = []
        for task, tool in columns:
            rows = {row["epoch"]: row for row in by_column[task, tool]}
            value = rows.get(epoch, {}).get(PRIMARY_KIND[task])
            cells.append("—" if value is None else f"{value:.3f}")
        lines.append(f"| {epoch} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def svg(rows: list[dict[str, Any]]) -> str:
    """Horizontal bars of the median whole-fit seconds, one per (task, tool)."""
    shown = [r for r in rows if r["whole_s"]]
    longest = max((r["whole_s"]["median"] for r in shown), default=1.0)
    bar_h, left, width = 22, 170, 420
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 80}" '
        f'height="{bar_h * len(shown) + 40}" font-family="sans-serif" font-size="12">',
        f'<text x="{left}" y="14">whole fit, seconds (median; shorter is faster)</text>',
    ]
    colours = {"ultralytics": "#8c8c8c", "native": "#4c72b0", "replay": "#dd8452"}
    for i, row in enumerate(shown):
        y = 24 + i * bar_h
        seconds = row["whole_s"]["median"]
        w = width * seconds / longest
        label = f"{row['task']} · {row['tool']}"
        parts.append(f'<text x="{left - 6}" y="{y + 15}" text-anchor="end">{label}</text>')
        parts.append(
            f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{bar_h - 6}" '
            f'fill="{colours.get(row["tool"], "#55a868")}"/>'
        )
        parts.append(f'<text x="{left + w + 4:.1f}" y="{y + 15}">{seconds:.1f}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


SAME_SETTINGS = (
    "batch",
    "epochs",
    "imgsz",
    "images",
    "val_images",
    "device",
    "workers",
    "ultralytics_cache",
    "lucid_args",
    "own_environments",
    "substitute",
)
"""Settings that must match for runs of two calls to share one report (``--merge``)."""
SETTINGS_BEFORE_THEY_EXISTED = {"own_environments": "None", "substitute": "[]"}
"""What a report written before a setting existed ran with (the option's absence)."""


def compared_setting(key: str, value: str | None) -> str | None:
    """A report's setting in the form two reports compare: ``--substitute`` as ``NAME=DIST``
    strings. Reports written before the option's values were parsed into pairs (session 28's
    first calls) saved the strings given; later ones save the pairs."""
    if key != "substitute" or value is None or not value.startswith("["):
        return value
    try:
        items = ast.literal_eval(value)
    except (SyntaxError, ValueError) as error:
        raise SystemExit(f"--merge: a report's substitute {value!r} is not a list") from error
    return str(["=".join(item) if isinstance(item, tuple) else item for item in items])


def merged_runs(paths: list[Path], args: argparse.Namespace) -> list[dict[str, Any]]:
    """The runs of earlier calls' ``side_by_side.json`` files, refused if a setting differs.

    One device call holds only a few 30-epoch fits, so the alternating rounds of one benchmark
    may come from several calls; their runs join into one set of medians and ranges.
    """
    runs: list[dict[str, Any]] = []
    for path in paths:
        try:
            earlier = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise SystemExit(f"--merge {path}: not a side_by_side.json ({error})") from error
        if getattr(args, "memory_history", 0) or earlier["args"].get("memory_history", "0") != "0":
            raise SystemExit(
                f"--merge {path}: a run with --memory-history has void times; "
                "merge only runs without it"
            )
        for key in SAME_SETTINGS:
            mine, theirs = (
                str(getattr(args, key)),
                earlier["args"].get(key, SETTINGS_BEFORE_THEY_EXISTED.get(key)),
            )
            if compared_setting(key, theirs) != compared_setting(key, mine):
                raise SystemExit(
                    f"--merge {path}: {key} was {theirs!r} there and is {mine!r} here; "
                    "merge only runs of the same settings"
                )
        runs.extend(earlier["runs"])
    return runs


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--ultralytics-worker":
        ultralytics_worker(json.loads(sys.argv[2]))
        return
    from dependency_closure import substitute_pair  # the worker needs only Ultralytics

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tasks", default="detect", help="comma-separated: detect,segment,pose,obb"
    )
    parser.add_argument(
        "--tools", default="ultralytics,replay,native", help="comma-separated, run in this order"
    )
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--images", type=int, default=512, help="training images")
    parser.add_argument("--val-images", type=int, default=128)
    parser.add_argument(
        "--repeats", type=int, default=1, help="alternating rounds; the order rotates"
    )
    parser.add_argument(
        "--first-round",
        type=int,
        default=0,
        help="this call's first round (earlier calls ran the rounds before; the order rotates on)",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="*",
        default=[],
        help="side_by_side.json files of earlier calls with the same settings: their runs join "
        "this report's medians and ranges",
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--ultralytics-cache", action="store_true", help="Ultralytics with cache='ram'"
    )
    parser.add_argument(
        "--concurrent",
        action="store_true",
        help="start every fit at once (accuracy only: times are void)",
    )
    parser.add_argument(
        "--accuracy",
        action="store_true",
        help="the accuracy side-by-side: every fit at once, Ultralytics and lucid-yolo on "
        "separate GPUs when two are visible, workers split over the cores (times are void)",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="loader workers per fit (each tool's default)"
    )
    parser.add_argument(
        "--lucid-args", default="", help="extra flags for every lucid-yolo fit, one string"
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per fit")
    parser.add_argument(
        "--memory-history",
        type=int,
        default=0,
        help="lucid-yolo fits record this many allocator events and report who held the "
        "memory at their peaks (bench_probe.FitProbe; times are then void)",
    )
    parser.add_argument(
        "--bytecode-cache",
        type=Path,
        default=None,
        help="keep every process's compiled bytecode here (compiled first by the warm-up)",
    )
    parser.add_argument(
        "--own-environments",
        type=Path,
        default=None,
        metavar="DIR",
        help="run each tool from a fresh environment of its own dependency closure, built "
        "under DIR from the installed libraries (dependency_closure.py)",
    )
    parser.add_argument(
        "--substitute",
        type=substitute_pair,
        action="append",
        default=[],
        metavar="NAME=DIST",
        help="with --own-environments: resolve requirement NAME to installed distribution DIST",
    )
    parser.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="skip the untimed warm-up process before the first fit",
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-out")))
    parser.add_argument("--data-root", type=Path, default=Path("/tmp/lucid-bench-data"))
    parser.add_argument(
        "--runs-dir", type=Path, default=None, help="run folders and logs (OUT/runs)"
    )
    args = parser.parse_args()
    if args.memory_history < 0:
        parser.error(f"--memory-history {args.memory_history}: give 0 (off) or more entries")
    args.runs_dir = args.runs_dir or args.out / "runs"

    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    tasks = args.tasks.split(",")
    tools = args.tools.split(",")
    fits = len(tasks) * len(tools) * args.repeats
    args.concurrent = args.concurrent or args.accuracy
    args.split_gpus = args.accuracy and args.device == "cuda" and torch.cuda.device_count() > 1
    if args.accuracy and args.workers is None:
        args.workers = max((os.cpu_count() or 1) // fits - 1, 1)
    datasets = {
        task: synthetic_set(args.data_root, task, args.images, args.val_images, args.imgsz)
        for task in tasks
    }
    plan = [
        (task, tools[(i + r) % len(tools)], r)
        for r in range(args.first_round, args.first_round + args.repeats)
        for task in tasks
        for i in range(len(tools))
    ]
    records = merged_runs(args.merge, args)
    args.environments = {}
    if args.own_environments is not None:
        args.environments = own_environments(tools, args)
        for name, environment in args.environments.items():
            print(
                f"environment {name}: {len(environment['distributions'])} distributions",
                flush=True,
            )
            for key in ("missing", "unsatisfied", "clashes"):
                for line in environment[key]:
                    print(f"  {key}: {line}", flush=True)
    result = args.out / "side_by_side.json"
    if args.warm_up:
        print(f"warm-up: {warm_up(tools, args):.1f} s (untimed)", flush=True)

    def save() -> None:
        rows = summarise(records)
        result.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items() if k != "environments"},
                    "environments": args.environments,
                    "runs": records,
                    "rows": rows,
                },
                indent=2,
            )
        )
        report = accuracy_table(records, args) if args.accuracy else table(rows, args)
        (args.out / "side_by_side.md").write_text(report + "\n")
        (args.out / "side_by_side.svg").write_text(svg(rows))

    if args.concurrent:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(plan)) as pool:
            for record in pool.map(lambda p: run_one(p[0], p[1], datasets[p[0]], args, p[2]), plan):
                records.append(record)
                save()
    else:
        for task, tool, r in plan:
            records.append(run_one(task, tool, datasets[task], args, r))
            save()
            print(
                f"{task} {tool} #{r}: exit {records[-1]['exit']}, {records[-1]['whole_s']:.1f} s",
                flush=True,
            )
    save()
    print(accuracy_table(records, args) if args.accuracy else table(summarise(records), args))


if __name__ == "__main__":
    main()
