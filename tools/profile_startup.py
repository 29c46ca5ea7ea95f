"""Where `lucid-yolo fit` spends its start-up: process start to the first training batch.

Issue 11 reports the start-up seconds apart from the fit. This tool splits them. It runs a short
`lucid-yolo fit` (the same command line as ``tools/bench_side_by_side.py``: packaged ``<task>-n``
config, the data module's defaults, progress bar off) in a fresh process whose start the parent
stamps, and times, with wall clocks and no profiler:

* the interpreter's own start-up (spawn to the first line of the child);
* the imports of the CLI (torch, Lightning and everything they pull in, lucid-yolo);
* the CLI: parser built, command line parsed, classes instantiated (model, data module, trainer);
* the fit's set-up: the data module's ``setup`` (labels read, RAM or disk cache filled), the
  strategy's set-up (model to the device, optimizers), the model summary, the sanity check (and
  in it, as in each validation: the loader's iterator started, which forks its workers the first
  time, the validation steps, the metrics at the epoch's end);
* each of the first training steps (device synchronised at each step's end), so the steps that
  record CUDA graphs stand out from the replayed ones after them, and in them the training
  step's forward and loss, the backward, the optimizer step, and the replay recorders' native
  calls, warm-ups and recordings (each listed with its first call's seconds).

With ``--profile-ops N`` one more run records PyTorch's profiler, host side only, over the
sanity check and over the first N training steps, and writes each window's operators by their
own and by their total host seconds, and by their own seconds per input shape
(``ops_sanity_check.txt``, ``ops_first_steps.txt``): which calls the first steps' seconds are in
(cuDNN's first convolutions, and which of them; the recordings' copies).

Each timed call is a wrapper put around a class attribute in the child before the command runs;
nothing the fit computes changes. A second run under ``python -X importtime`` gives the import
seconds per top-level package (own time, whoever imported it) and the cumulative seconds of the
heavy imports that matter here (Lightning's ``torchmetrics`` and what it pulls in); that run and
the warm-up run (``--warm``) stop after two training and two validation batches.

Run (GPU machine; ``tools/`` and the packages' ``src`` on ``PYTHONPATH``; the synthetic images
are written under ``--out``, so keep it off a results folder meant for small files)::

    python3 tools/profile_startup.py --replay --warm --out /tmp/startup

CPU smoke run (dev machine)::

    uv run python tools/profile_startup.py --cpu --images 16 --val-images 8 --imgsz 128 \\
        --steps 2 --out /tmp/startup

Writes ``startup.json`` (every mark and step, the import table) and ``startup.md`` (the tables)
into ``--out``. Python compiles every module it imports when it has no ``.pyc`` to read (a fresh
virtual environment, ``PYTHONDONTWRITEBYTECODE=1``): run once to warm the cache first
(``--warm``), as an installed user's second run would find it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench_side_by_side import lucid_fit_arguments

SPAWN_ENV = "LUCID_STARTUP_SPAWN"
"""Environment variable holding the parent's ``time.time()`` just before it started the child."""
CHILD_FLAG = "--child"
"""First argument of the child process: ``--child <marks.json> <fit arguments>``."""
HEAVY_IMPORTS = (
    "torch",
    "lightning",
    "lightning.fabric.utilities.imports",
    "torchmetrics.functional",
    "transformers",
    "torchvision",
    "torch._dynamo",
    "scipy.signal",
    "sklearn",
    "pandas",
    "mpi4py.MPI",
    "jsonargparse",
    "lucid_yolo.models",
    "lucid_yolo.train",
    "lucid_yolo.cli.lightning_cli",
)
"""Modules whose cumulative import seconds the table lists where the run imports them."""

PROFILE_ENV = "LUCID_STARTUP_PROFILE_STEPS"
"""Environment variable of the ``--profile-ops`` run: the training steps its profile covers."""
OPS_ROWS = 30
"""Operators listed per table of an operator profile."""
SHORT_RUN = ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "2"]
"""Added to the warm-up and ``-X importtime`` runs: training and validation both run, briefly."""
MAX_LISTED_CALLS = 4
"""A phase called more often shows its call count instead of each call's seconds."""
SHOWN_STEPS = 8
"""Training steps listed one by one in the table (recording happens in the first few)."""

# (label, module, class, attribute, parent label); a parent's time includes its children's
TIMED = (
    ("CLI parser built", "lightning.pytorch.cli", "LightningCLI", "setup_parser", ""),
    ("command line parsed", "lightning.pytorch.cli", "LightningCLI", "parse_arguments", ""),
    ("classes instantiated", "lightning.pytorch.cli", "LightningCLI", "instantiate_classes", ""),
    ("model built", "lucid_yolo.train", "YoloModule", "__init__", "classes instantiated"),
    ("data module built", "lucid_yolo.train", "YoloDataModule", "__init__", "classes instantiated"),
    ("trainer built", "lightning.pytorch", "Trainer", "__init__", "classes instantiated"),
    ("data set-up", "lucid_yolo.train", "YoloDataModule", "setup", ""),
    ("RAM cache filled", "lucid_yolo.train.data.cache", "ImageCache", "fill", "data set-up"),
    ("disk cache", "lucid_yolo.train.data.disk_cache", "DiskImageCache", "__init__", "data set-up"),
    ("strategy set-up", "lightning.pytorch.strategies", "Strategy", "setup", ""),
    ("model summary", "lucid_yolo.cli.fit_summary", "FitModelSummary", "on_fit_start", ""),
    ("sanity check", "lightning.pytorch", "Trainer", "_run_sanity_check", ""),
    (
        "evaluation loop (sanity check, then validations)",
        "lightning.pytorch.loops.evaluation_loop",
        "_EvaluationLoop",
        "run",
        "",
    ),
    ("loader iterator started", "torch.utils.data", "DataLoader", "__iter__", ""),
    ("validation steps", "lucid_yolo.train", "YoloModule", "validation_step", ""),
    ("validation metrics", "lucid_yolo.train", "YoloModule", "on_validation_epoch_end", ""),
    ("training steps (forward, loss)", "lucid_yolo.train", "YoloModule", "training_step", ""),
    ("backward", "lightning.pytorch.strategies", "Strategy", "backward", ""),
    ("optimizer steps (closures in them)", "lucid_yolo.train", "YoloModule", "optimizer_step", ""),
    ("region: native calls", "lucid_yolo.replay.recorder", "RegionRecorder", "_native", ""),
    ("region: warm-up", "lucid_yolo.replay.recorder", "RegionRecorder", "_warm_up", ""),
    ("region: recording", "lucid_yolo.replay.recorder", "RegionRecorder", "_record", ""),
    ("evaluation graph: recording", "lucid_yolo.replay.forward", "ForwardRecorder", "_record", ""),
    ("update: native", "lucid_yolo.replay.update", "UpdateRecorder", "_native", ""),
    ("update: recording", "lucid_yolo.replay.update", "UpdateRecorder", "_record", ""),
)


# --------------------------------------------------------------------------- child: timing


class _OpProfile:
    """PyTorch's profiler, host side only, over one window at a time; each window's operators
    are written as three tables: by their own and by their total host seconds, and by their own
    seconds per input shape (which convolutions a first call's seconds are in)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._profile: Any = None

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self._profile = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
        self._profile.start()

    def stop(self, name: str) -> None:
        profile, self._profile = self._profile, None
        profile.stop()
        averages = profile.key_averages()
        tables = [
            f"{name}: operators by {key.replace('_', ' ')}\n"
            + averages.table(sort_by=key, row_limit=OPS_ROWS)
            for key in ("self_cpu_time_total", "cpu_time_total")
        ]
        by_shape = profile.key_averages(group_by_input_shape=True)
        tables.append(
            f"{name}: operators by self cpu time total, per input shape\n"
            + by_shape.table(sort_by="self_cpu_time_total", row_limit=OPS_ROWS)
        )
        (self.folder / f"ops_{name}.txt").write_text("\n\n".join(tables))


class _Clock:
    """First start, last end and total seconds of each timed call, from the process's spawn;
    with ``ops``, the operator profile of the first ``profiled_steps`` training steps."""

    def __init__(
        self, spawned: float, ops: _OpProfile | None = None, profiled_steps: int = 0
    ) -> None:
        self.spawned = spawned
        self.ops = ops
        self.profiled_steps = profiled_steps
        self.calls: dict[str, dict[str, Any]] = {}
        self.steps: list[float] = []
        self.first_batch = 0.0
        self._step_began = 0.0

    def wrap(self, label: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.time()
            try:
                return function(*args, **kwargs)
            finally:
                ended = time.time()
                call = self.calls.setdefault(label, {"start_s": began - self.spawned, "each_s": []})
                call["each_s"].append(ended - began)

        return timed

    def batch_start(self) -> None:
        if self.ops is not None and not self.steps:
            self.ops.start()
        self._step_began = time.time()
        if not self.first_batch:
            self.first_batch = self._step_began - self.spawned

    def batch_end(self) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.steps.append(time.time() - self._step_began)
        if self.ops is not None and len(self.steps) == self.profiled_steps:
            self.ops.stop("first_steps")


def _wrap(clock: _Clock, entry: tuple[str, str, str, str, str]) -> None:
    import importlib

    label, module, owner, attribute, _ = entry
    cls = getattr(importlib.import_module(module), owner)
    setattr(cls, attribute, clock.wrap(label, getattr(cls, attribute)))


def _install(clock: _Clock) -> None:
    """Put a timing wrapper around every attribute of :data:`TIMED` and the batch hooks."""
    from lightning.pytorch.cli import LightningCLI

    from lucid_yolo.train import YoloModule

    for entry in TIMED:
        if entry[3] != "__init__":
            _wrap(clock, entry)
    # jsonargparse builds the parser from the constructors' signatures: wrap them once it is built
    instantiate = LightningCLI.instantiate_classes

    def instantiate_classes(self: LightningCLI) -> None:
        for entry in TIMED:
            if entry[3] == "__init__":
                _wrap(clock, entry)
        instantiate(self)

    LightningCLI.instantiate_classes = instantiate_classes  # type: ignore[method-assign]
    start, end = YoloModule.on_train_batch_start, YoloModule.on_train_batch_end

    def on_train_batch_start(self: Any, *args: Any) -> Any:
        clock.batch_start()
        return start(self, *args)

    def on_train_batch_end(self: Any, *args: Any) -> None:
        end(self, *args)
        clock.batch_end()

    YoloModule.on_train_batch_start = on_train_batch_start  # type: ignore[method-assign,assignment]
    YoloModule.on_train_batch_end = on_train_batch_end  # type: ignore[method-assign,assignment]


def _profile_sanity_check(ops: _OpProfile) -> None:
    """Profile the sanity check's operators (the first steps' are :class:`_Clock`'s)."""
    from lightning.pytorch import Trainer

    sanity_check = Trainer._run_sanity_check

    def run_sanity_check(self: Trainer) -> None:
        ops.start()
        try:
            sanity_check(self)
        finally:
            ops.stop("sanity_check")

    Trainer._run_sanity_check = run_sanity_check  # type: ignore[method-assign]


def run_child(record: Path, fit_args: list[str]) -> None:
    """Import the CLI, install the timers, run ``lucid-yolo fit``; write the marks to ``record``."""
    spawned = float(os.environ.get(SPAWN_ENV, time.time()))
    began = time.time()
    import lucid_yolo.cli.lightning_cli  # noqa: F401  (the import is what is timed)

    imported = time.time()
    ops = _OpProfile(record.parent) if PROFILE_ENV in os.environ else None
    clock = _Clock(spawned, ops, int(os.environ.get(PROFILE_ENV, 0)))
    _install(clock)
    if ops is not None:
        _profile_sanity_check(ops)
    from lucid_yolo.cli.main import main

    code = main(["fit", *fit_args])
    ended = time.time()
    result = {
        "interpreter_s": began - spawned,
        "imports_s": imported - began,
        "calls": clock.calls,
        "first_batch_s": clock.first_batch,
        "steps_s": clock.steps,
        "exit_s": ended - spawned,
        "exit_code": code,
    }
    record.write_text(json.dumps(result, indent=2))


# --------------------------------------------------------------------------- import times


def import_times(log: str) -> dict[str, Any]:
    """Own seconds per top-level package and cumulative seconds of :data:`HEAVY_IMPORTS`, read
    from the ``-X importtime`` lines of ``log`` (a module is listed once, where it is first
    imported, so each package's own seconds add up to what the process spent on it)."""
    own: dict[str, float] = defaultdict(float)
    cumulative: dict[str, float] = {}
    total = 0.0
    for line in log.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        fields = line.removeprefix("import time:").split("|")
        if not fields[0].strip().isdigit():
            continue  # the header line
        self_us, cumulative_us, name = int(fields[0]), int(fields[1]), fields[2].strip()
        own[name.split(".")[0]] += self_us / 1e6
        total += self_us / 1e6
        if name in HEAVY_IMPORTS and name not in cumulative:
            cumulative[name] = cumulative_us / 1e6
    return {
        "total_s": total,
        "own_by_package_s": dict(sorted(own.items(), key=lambda kv: -kv[1])),
        "cumulative_s": cumulative,
    }


# --------------------------------------------------------------------------- report


def _phase_rows(calls: dict[str, dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The timed calls in the order they first started, children indented under parents."""
    parents = {label: parent for label, *_, parent in TIMED}
    for label, call in sorted(calls.items(), key=lambda kv: kv[1]["start_s"]):
        indent = "  " if parents.get(label) else ""
        yield indent + label, call


def steady_step(steps: list[float]) -> float:
    """The median of the last half of the steps: a replayed step, once recording is over."""
    return statistics.median(steps[len(steps) // 2 :]) if steps else 0.0


def report(marks: dict[str, Any], imports: dict[str, Any] | None) -> str:
    """Markdown tables: start-up phases, first steps, import seconds."""
    lines = []
    if marks["exit_code"] != 0:
        lines += [f"**The fit failed (exit code {marks['exit_code']}); see fit.log.**", ""]
    lines += [
        "| phase | starts at s | seconds |",
        "|---|---|---|",
        f"| interpreter start-up | 0.00 | {marks['interpreter_s']:.2f} |",
        f"| imports (CLI, torch, Lightning, lucid-yolo) | {marks['interpreter_s']:.2f} | "
        f"{marks['imports_s']:.2f} |",
    ]
    for label, call in _phase_rows(marks["calls"]):
        each = call["each_s"]
        calls = ""
        if 1 < len(each) <= MAX_LISTED_CALLS:
            calls = f" ({' + '.join(f'{s:.2f}' for s in each)})"
        elif len(each) > MAX_LISTED_CALLS:
            calls = f" ({len(each)} calls, the first {each[0]:.2f})"
        lines.append(f"| {label}{calls} | {call['start_s']:.2f} | {sum(each):.2f} |")
    lines += [f"| **first training batch starts** | {marks['first_batch_s']:.2f} | |", ""]
    steps = marks["steps_s"]
    if steps:
        steady = steady_step(steps)
        extra = sum(s - steady for s in steps[: len(steps) // 2])
        lines += [
            f"{len(steps)} training steps (the first {min(len(steps), SHOWN_STEPS)} listed):",
            "",
            "| step | seconds |",
            "|---|---|",
            *(f"| {i + 1} | {s:.3f} |" for i, s in enumerate(steps[:SHOWN_STEPS])),
            f"| median of the last half | {steady:.3f} |",
            f"| first half's seconds above that median (recording, warm-up) | {extra:.2f} |",
            "",
        ]
    if imports is not None:
        lines += [
            f"Import seconds under `-X importtime` (total own time {imports['total_s']:.2f} s):",
            "",
            "| module (cumulative, where first imported) | seconds |",
            "|---|---|",
            *(f"| {name} | {s:.2f} |" for name, s in imports["cumulative_s"].items()),
            "",
            "| package (own time of all its modules) | seconds |",
            "|---|---|",
            *(f"| {n} | {s:.2f} |" for n, s in list(imports["own_by_package_s"].items())[:15]),
        ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- parent


def fit_args(args: argparse.Namespace, data: Path, runs: Path) -> list[str]:
    """The ``lucid-yolo fit`` arguments of the profiled run: the side-by-side benchmark's, with
    its step limit and extra flags, without the benchmark's probes."""
    command = lucid_fit_arguments(
        args.task, data, runs, batch=args.batch, imgsz=args.imgsz, epochs=args.epochs,
        replay=args.replay, cpu=args.cpu,
    )  # fmt: skip
    if args.steps is not None:
        command += ["--trainer.max_steps", str(args.steps)]
    extra: list[str] = args.lucid_args
    return command + extra


def _spawn(
    python_flags: list[str], child_args: list[str], log: Path, extra_env: dict[str, str]
) -> subprocess.Popen[bytes]:
    env = {**os.environ, **extra_env, SPAWN_ENV: repr(time.time())}
    command = [sys.executable, *python_flags, __file__, *child_args]
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)


def _run(
    python_flags: list[str],
    child_args: list[str],
    log: Path,
    extra_env: dict[str, str] | None = None,
) -> None:
    code = _spawn(python_flags, child_args, log, extra_env or {}).wait()
    if code != 0:
        raise SystemExit(f"profile_startup: the fit failed with exit code {code}; see {log}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON and tables")
    parser.add_argument("--data", type=Path, help="dataset YAML (default: a synthetic set)")
    parser.add_argument("--task", default="detect", choices=("detect", "segment", "pose", "obb"))
    parser.add_argument("--images", type=int, default=512, help="synthetic training images")
    parser.add_argument("--val-images", type=int, default=128, help="synthetic validation images")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--steps", type=int, help="stop after this many steps (--trainer.max_steps)"
    )
    parser.add_argument("--replay", action="store_true", help="every replay region of the task")
    parser.add_argument("--cpu", action="store_true", help="--trainer.accelerator cpu")
    parser.add_argument("--warm", action="store_true", help="one unmeasured fit first (.pyc)")
    parser.add_argument("--no-importtime", action="store_true", help="skip the -X importtime run")
    parser.add_argument(
        "--profile-ops",
        type=int,
        metavar="STEPS",
        help="one more run, profiled over the sanity check and the first STEPS training steps",
    )
    parser.add_argument("--lucid-args", nargs=argparse.REMAINDER, default=[], help="more flags")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.data
    if data is None:
        from lucid_yolo.train.data.synthetic import generate_synthetic

        data = generate_synthetic(
            args.out / "data",
            task=args.task,
            num_train=args.images,
            num_val=args.val_images,
            imgsz=args.imgsz,
        )
    command = fit_args(args, data, args.out / "runs")
    marks_file = args.out / "marks.json"
    # the warm-up and -X importtime runs import what the measured one does, in a few batches
    short = [*command, *SHORT_RUN]
    if args.warm:
        _run([], [CHILD_FLAG, str(args.out / "marks_warm.json"), *short], args.out / "warm.log")
    _run([], [CHILD_FLAG, str(marks_file), *command], args.out / "fit.log")
    marks = json.loads(marks_file.read_text())
    imports = None
    if not args.no_importtime:
        log = args.out / "importtime.log"
        _run(
            ["-X", "importtime"],
            [CHILD_FLAG, str(args.out / "marks_importtime.json"), *short],
            log,
        )
        imports = import_times(log.read_text())
    if args.profile_ops:
        _run(
            [],
            [CHILD_FLAG, str(args.out / "marks_ops.json"), *command],
            args.out / "ops.log",
            {PROFILE_ENV: str(args.profile_ops)},
        )
    (args.out / "startup.json").write_text(
        json.dumps({"command": command, "marks": marks, "imports": imports}, indent=2)
    )
    table = report(marks, imports)
    (args.out / "startup.md").write_text(table)
    print(table)


if __name__ == "__main__":
    if sys.argv[1:2] == [CHILD_FLAG]:
        run_child(Path(sys.argv[2]), sys.argv[3:])
    else:
        main()
