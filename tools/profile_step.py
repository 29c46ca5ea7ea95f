"""Where a replayed training step's time goes: the host's work, the GPU's work, the gap between.

A replayed step is fast only if the GPU is kept busy. This tool runs a short fit (validation off,
the data module's defaults, bf16, every replay region that applies to the task). Its second
third of steps runs unobserved and timed, which gives

* ``unprofiled_period_ms``: wall time per step as a fit sees it (device synchronised at both ends
  of the window); the profilers below slow the host several times over (cProfile most), so only
  this period, set against ``gpu_busy_ms``, says whether the step waits for the host. Both
  windows span epoch ends (with the default 256 images and 150 steps, about one in each window
  at batch 4 and three at batch 16), so this is a period with the loader's turnover in it, not
  ``PhaseTimer``'s median step;

and its last third is profiled, recording:

* ``period_ms``: wall time per step under the profilers;
* ``gpu_busy_ms``: per step, the union of the intervals in which the GPU ran a kernel or a copy
  (``torch.profiler``'s device activity, graph replays included); ``period_ms - gpu_busy_ms`` is
  the time the GPU waited for the profiled host, longer than in a fit;
* ``gpu_idle_gaps``: that idle time per step split by the gaps' length, under ``SHORT_GAP_US``
  and longer (how the two are read: :func:`gap_split`);
* ``device_work``: what the GPU ran per step: kernels, copies and memsets counted, the kernels'
  own time (summed, so kernels on concurrent streams count twice: it can exceed
  ``gpu_busy_ms``), how many kernels ran under ``SHORT_KERNEL_US`` and for how long, and the
  kernels that took the most time, by name: whether a step's GPU time is a few long kernels or
  many short ones;
* ``launches``: the same work split by what launched it (:func:`launch_split`): each recorded
  graph (its kernel count and first kernel name it; how often it ran a step, its kernels' time,
  its span on the device) and the eager rest by the host operator that launched it; and
  ``waits_before``, per group, the long idle gaps that ended with its work: what the device
  waited for;
* ``syncs_per_step`` and ``sync_sites``: host synchronisations with the device per step
  (``torch.cuda.set_sync_debug_mode("warn")`` over the window), and the Python lines that made
  them;
* ``host_cumulative`` and ``host_self``: the most expensive Python functions over the window
  (cProfile), by cumulative and by own time, each in milliseconds per step, so a host-bound
  step names its cause. From CPython 3.12 cProfile listens through ``sys.monitoring``, which
  reports every thread: the loader's pin-memory thread (its ``poll``, ``read``, unpickling and
  ``do_one_step``) and the checkpoint writer show beside the training thread; before 3.12 only
  the thread that enabled it.

With ``--native`` nothing is replayed and the profile also records input shapes, so that

* ``ops``: the operators (told apart by input shapes) whose own kernels took the most device
  time per step name the costly kernels' sources, which a replayed step cannot (its kernels
  belong to graph launches); an eager step runs the kernels a replayed one records (bitwise
  parity rests on it). The trace's busy time and device work are left out: 50 profiled eager
  steps of detect at batch 4 with shapes ran past 110 s in exporting and reading the trace
  (session 21; which part took the time is not known), and an eager period is not a replayed
  step's. ``--steps`` is 30 by default there (10 profiled steps).

With ``--one-region`` the network and its loss replay as one region
(``ReplayConfig.loss_with_network``; a segment net's heads then run in it, as in the
side-by-side benchmark's segment row since session 44; without it they are a region of their own
between the two).

Run (GPU machine, from source; one JSON file per run in ``--out``)::

    python3 tools/profile_step.py --task detect --batch 4 --steps 150 --out $OUT/detect-b4.json

On a machine without CUDA the fit runs on the CPU (a smoke test: ``--imgsz 64 --steps 6``); the
GPU columns are then empty.
"""

from __future__ import annotations

import argparse
import bisect
import cProfile
import io
import json
import pstats
import statistics
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch._C._autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from bench_replay_memory import MODELS
from bench_trainer import step_trainer
from find_host_syncs import SYNC_WARNING
from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
from lucid_yolo.train.data.synthetic import generate_synthetic

DEVICE_ACTIVITY_TYPES = ("kernel", "gpu_memcpy", "gpu_memset")
"""Chrome-trace categories of work the GPU does (torch.profiler's names)."""


class _Window(Callback):
    """Times the steps after ``plain_start`` up to ``start`` unobserved, then profiles those
    after ``start`` up to the fit's last one (``shapes``: the profile records input shapes)."""

    def __init__(self, plain_start: int, start: int, cuda: bool, shapes: bool = False) -> None:
        if not 0 < plain_start < start:
            raise ValueError(f"the unprofiled window [{plain_start}, {start}) is empty")
        self.plain_start = plain_start
        self.start = start
        self.cuda = cuda
        self.shapes = shapes
        self.plain_steps = 0
        self.plain_seconds = 0.0
        self.steps = 0
        self.seconds = 0.0
        self.host = cProfile.Profile()
        self.device: profile | None = None
        self.sync_sites: Counter[str] = Counter()
        self._began = 0.0
        self._catch: Any = None
        self._caught: list[warnings.WarningMessage] = []

    def on_train_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        step = trainer.global_step
        if step == self.plain_start:
            self._sync()
            self._began = time.perf_counter()
        elif step == self.start:
            self._sync()
            self.plain_seconds = time.perf_counter() - self._began
            self.plain_steps = self.start - self.plain_start
            self._begin()
        elif step > self.start:
            self.steps += 1
            if step == trainer.max_steps:
                self._end()

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def _begin(self) -> None:
        if self.cuda:
            self.device = profile(
                activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                record_shapes=self.shapes,
            )
            self.device.__enter__()  # type: ignore[no-untyped-call]
            self._catch = warnings.catch_warnings(record=True)
            self._caught = self._catch.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        self._began = time.perf_counter()
        self.host.enable()

    def _end(self) -> None:
        self.host.disable()
        if self.cuda:
            torch.cuda.set_sync_debug_mode("default")
            torch.cuda.synchronize()
        self.seconds = time.perf_counter() - self._began
        if self._catch is not None:
            self.sync_sites.update(
                f"{Path(w.filename).name}:{w.lineno}"
                for w in self._caught
                if SYNC_WARNING in str(w.message)
            )
            self._catch.__exit__(None, None, None)
        if self.device is not None:
            self.device.__exit__(None, None, None)  # type: ignore[no-untyped-call]


SHORT_KERNEL_US = 10.0
"""Kernels shorter than this (microseconds) are counted apart: how much of a step they are."""

SHORT_GAP_US = 20.0
"""Idle gaps on the device shorter than this (microseconds) are counted apart from longer ones:
well above the 0.5-0.6 µs a replayed graph's node-to-node gaps took on the H200 (session 21),
well below a host's launch of a graph."""


def trace_events(trace: Path) -> list[dict[str, Any]]:
    """Every event of a chrome trace (host and device)."""
    events: list[dict[str, Any]] = json.loads(trace.read_text())["traceEvents"]
    return events


def device_only(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of work on the device (kernels, copies, memsets)."""
    return [e for e in events if e.get("cat") in DEVICE_ACTIVITY_TYPES and "ts" in e]


def device_events(trace: Path) -> list[dict[str, Any]]:
    """A chrome trace's events of work on the device."""
    return device_only(trace_events(trace))


def busy_and_gaps(events: list[dict[str, Any]]) -> tuple[float, list[float]]:
    """Milliseconds in which the device did any work (the union of its activity intervals), and
    the idle gaps between those intervals in microseconds."""
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e in events)
    busy, end, gaps = 0.0, float("-inf"), []
    for start, stop in spans:
        if stop <= end:
            continue
        if start > end > float("-inf"):
            gaps.append(start - end)
        busy += stop - max(start, end)
        end = stop
    return busy / 1000.0, gaps


def gap_split(gaps: list[float], steps: int) -> dict[str, Any]:
    """Per step, the device's idle time in gaps under ``SHORT_GAP_US`` and in longer ones. In a
    replayed step the short gaps are read as the GPU moving from one node of a graph to the next
    (a latency no host speed shortens), the long ones as the GPU waiting for work; in an eager
    step a launch issued just in time can also leave a short gap."""
    short = [gap for gap in gaps if gap < SHORT_GAP_US]
    long = [gap for gap in gaps if gap >= SHORT_GAP_US]
    return {
        "under_us": SHORT_GAP_US,
        "short_per_step": round(len(short) / steps, 1),
        "short_ms": round(sum(short) / 1000.0 / steps, 3),
        "long_per_step": round(len(long) / steps, 1),
        "long_ms": round(sum(long) / 1000.0 / steps, 3),
    }


def device_work(events: list[dict[str, Any]], steps: int, count: int) -> dict[str, Any]:
    """Per step: the device's activities by kind, its kernels' own time and how much of it short
    kernels took, and the ``count`` kernels (by name) that took the most time."""
    kernels = [e for e in events if e["cat"] == "kernel"]
    durations = [float(e.get("dur", 0.0)) for e in kernels]
    short = [d for d in durations if d < SHORT_KERNEL_US]
    by_name: dict[str, list[float]] = {}
    for kernel, duration in zip(kernels, durations, strict=True):
        by_name.setdefault(str(kernel.get("name", "?")), []).append(duration)
    top = sorted(by_name.items(), key=lambda item: -sum(item[1]))[:count]
    return {
        "per_step": {
            kind: round(sum(e["cat"] == kind for e in events) / steps, 1)
            for kind in DEVICE_ACTIVITY_TYPES
        },
        "kernel_ms": round(sum(durations) / 1000.0 / steps, 3),
        "short_kernels": {
            "under_us": SHORT_KERNEL_US,
            "per_step": round(len(short) / steps, 1),
            "ms": round(sum(short) / 1000.0 / steps, 3),
        },
        "median_kernel_us": round(statistics.median(durations), 2) if durations else None,
        "top_kernels": [
            {
                "name": name,
                "per_step": round(len(times) / steps, 2),
                "ms": round(sum(times) / 1000.0 / steps, 3),
                "mean_us": round(statistics.fmean(times), 2),
            }
            for name, times in top
        ],
    }


GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")
"""Runtime and driver calls that launch a recorded graph (torch.profiler's names)."""


def launch_split(events: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """Per step, the device's work and its waits by what launched them.

    A kernel carries the correlation id of the host call that launched it; a graph launch gives
    all its kernels one id. Each graph is named by its kernel count and first kernel (a replayed
    region's graphs differ in both), so the split says per graph how often it ran a step, its
    kernels' time and its span on the device, and for the eager rest, which operator (the
    innermost ``cpu_op`` around the launch on its thread) ran the kernels. ``waits_before``
    sums, per group, the long idle gaps (``SHORT_GAP_US`` and more) that ended with one of its
    activities: what the device was waiting for when it sat idle. ``events``: every event of
    the trace (:func:`trace_events`)."""
    launchers = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    operators = _operators_by_thread(events)
    device = sorted(device_only(events), key=lambda e: float(e["ts"]))
    by_launch: dict[Any, list[dict[str, Any]]] = {}
    for event in device:
        by_launch.setdefault(event.get("args", {}).get("correlation"), []).append(event)
    group_of: dict[int, str] = {}
    groups: dict[str, dict[str, float]] = {}
    for correlation, activities in by_launch.items():
        launcher = launchers.get(correlation)
        if launcher is not None and launcher.get("name") in GRAPH_LAUNCHES:
            name = f"graph: {len(activities)} nodes, first {str(activities[0].get('name'))[:60]}"
        else:
            name = f"eager: {_innermost_operator(launcher, operators)}"
        group_of.update((id(activity), name) for activity in activities)
        ends = (float(a["ts"]) + float(a.get("dur", 0.0)) for a in activities)
        row = groups.setdefault(name, {"launches": 0, "activities": 0, "ms": 0.0, "span_ms": 0.0})
        row["launches"] += 1
        row["activities"] += len(activities)
        row["ms"] += sum(float(a.get("dur", 0.0)) for a in activities) / 1000.0
        row["span_ms"] += (max(ends) - float(activities[0]["ts"])) / 1000.0
    waits: dict[str, float] = {}
    end = float("-inf")
    for event in device:
        start, stop = float(event["ts"]), float(event["ts"]) + float(event.get("dur", 0.0))
        if end > float("-inf") and start - end >= SHORT_GAP_US:
            name = group_of[id(event)]
            waits[name] = waits.get(name, 0.0) + (start - end) / 1000.0
        end = max(end, stop)
    return {
        "groups": sorted(
            (
                {
                    "group": name,
                    "per_step": round(row["launches"] / steps, 2),
                    "activities_per_launch": round(row["activities"] / row["launches"], 1),
                    "ms": round(row["ms"] / steps, 3),
                    "span_ms": round(row["span_ms"] / steps, 3),
                }
                for name, row in groups.items()
            ),
            key=lambda row: -float(row["ms"]),
        ),
        "waits_before": {
            name: round(ms / steps, 3) for name, ms in sorted(waits.items(), key=lambda kv: -kv[1])
        },
    }


def _operators_by_thread(
    events: list[dict[str, Any]],
) -> dict[Any, tuple[list[float], list[dict[str, Any]]]]:
    """Each thread's host operators sorted by start, with their starts (for bisection)."""
    threads: dict[Any, list[dict[str, Any]]] = {}
    for event in events:
        if event.get("cat") == "cpu_op" and "ts" in event:
            threads.setdefault(event.get("tid"), []).append(event)
    return {
        tid: ([float(e["ts"]) for e in ops], ops)
        for tid, ops in (
            (tid, sorted(ops, key=lambda e: float(e["ts"]))) for tid, ops in threads.items()
        )
    }


ENCLOSING_SCAN = 500
"""How many host operators before a launch :func:`_innermost_operator` looks through."""


def _innermost_operator(
    launcher: dict[str, Any] | None,
    operators: dict[Any, tuple[list[float], list[dict[str, Any]]]],
) -> str:
    """The latest-starting host operator on the launcher's thread that encloses the launch
    (nested operators start after their parents), looked for among the ``ENCLOSING_SCAN``
    operators before it, or the launch call's own name."""
    if launcher is None:
        return "?"
    starts, ops = operators.get(launcher.get("tid"), ([], []))
    begin = float(launcher["ts"])
    finish = begin + float(launcher.get("dur", 0.0))
    last = bisect.bisect_right(starts, begin) - 1
    for index in range(last, max(last - ENCLOSING_SCAN, -1), -1):
        op = ops[index]
        if float(op["ts"]) + float(op.get("dur", 0.0)) >= finish:
            return str(op.get("name"))
    return str(launcher.get("name"))


def ops_by_device_time(device: profile, steps: int, count: int) -> list[dict[str, Any]]:
    """The ``count`` operators, told apart by their input shapes, whose own kernels took the
    most device time per step: which operator a costly kernel belongs to. Only an eager step
    has them; a replayed step's kernels belong to graph launches, not to operators. The
    averages also hold one entry per kernel (a CUDA event); those are left out, so that each
    kernel's time counts once, inside its operator."""
    averages = device.key_averages(group_by_input_shape=True)
    rows = [
        {
            "op": event.key,
            "input_shapes": str(event.input_shapes)[:200],
            "calls": round(event.count / steps, 2),
            "device_ms": round(event.self_device_time_total / 1000.0 / steps, 3),
        }
        for event in averages
        if event.device_type == DeviceType.CPU and event.self_device_time_total > 0
    ]
    rows.sort(key=lambda row: -row["device_ms"])
    return rows[:count]


def _host_top(host: cProfile.Profile, steps: int, key: str, count: int) -> list[dict[str, Any]]:
    """The ``count`` functions with the most ``key`` time (``cum_ms`` or ``self_ms``) per step."""
    stats = pstats.Stats(host, stream=io.StringIO())
    rows = [
        {
            "function": f"{Path(file).name}:{line}:{name}",
            "calls": round(calls / steps, 1),
            "cum_ms": round(cumtime * 1000.0 / steps, 3),
            "self_ms": round(tottime * 1000.0 / steps, 3),
        }
        for (file, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items()  # type: ignore[attr-defined]
    ]
    rows.sort(key=lambda row: -row[key])
    return rows[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="detect", choices=sorted(MODELS))
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument(
        "--steps", type=int, default=None, help="steps of the fit (150; 30 with --native)"
    )
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-profile-step"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--native",
        action="store_true",
        help="replay nothing, and name the operators whose kernels take the device's time",
    )
    parser.add_argument(
        "--one-region",
        action="store_true",
        help="replay the network and its loss as one region (segment: with its heads)",
    )
    args = parser.parse_args()
    if args.one_region and args.native:
        parser.error("--one-region: not with --native (nothing replays)")
    if args.steps is None:
        args.steps = 30 if args.native else 150
    if args.steps < 3:
        parser.error(
            f"--steps {args.steps}: at least 3 (a third warms up, a third is timed, "
            "a third is profiled)"
        )
    root = args.root / args.task
    if not (root / "data.yaml").is_file():
        generate_synthetic(
            root, task=args.task, num_train=args.images, num_val=16, imgsz=args.imgsz, seed=0
        )
    pl.seed_everything(0)
    data = YoloDataModule(
        root / "data.yaml", task=args.task, imgsz=args.imgsz, batch_size=args.batch
    )
    cuda = torch.cuda.is_available()
    options: dict[str, Any] = {}
    if args.task == "pose":
        kpt_shape = data.spec.kpt_shape
        if kpt_shape is None:
            raise ValueError(f"{root / 'data.yaml'}: a pose dataset without kpt_shape")
        options["kpt_shape"] = tuple(kpt_shape)
    module = YoloModule(
        MODELS[args.task],
        num_classes=data.num_classes,
        **options,
        replay=ReplayConfig(
            network=not args.native,
            segment_heads=args.task == "segment" and not (args.native or args.one_region),
            loss=not args.native,
            update=not args.native,
            loss_with_network=args.one_region,
        ),
    )
    window = _Window(args.steps // 3, 2 * args.steps // 3, cuda, shapes=args.native)
    trainer = step_trainer(
        args.steps, window, accelerator="auto", precision="bf16-mixed" if cuda else "32-true"
    )
    trainer.fit(module, data)
    steps = max(window.steps, 1)
    row: dict[str, Any] = {
        "task": args.task,
        "batch": args.batch,
        "replayed": not args.native,
        "one_region": args.one_region,
        "workers": data.workers,
        "steps_unprofiled": window.plain_steps,
        "unprofiled_period_ms": round(
            window.plain_seconds * 1000.0 / max(window.plain_steps, 1), 3
        ),
        "steps_timed": window.steps,
        "period_ms": round(window.seconds * 1000.0 / steps, 3),
        "replays": int(module.replay_telemetry.replays),
        "syncs_per_step": round(window.sync_sites.total() / steps, 3),
        "sync_sites": dict(window.sync_sites.most_common()),
    }
    if window.device is not None and args.native:
        row["ops"] = ops_by_device_time(window.device, steps, 40)
    elif window.device is not None:
        trace = args.out.with_suffix(".trace.json")
        window.device.export_chrome_trace(str(trace))
        everything = trace_events(trace)
        events = device_only(everything)
        busy, gaps = busy_and_gaps(events)
        row["gpu_busy_ms"] = round(busy / steps, 3)
        row["gpu_idle_gaps"] = gap_split(gaps, steps)
        row["device_work"] = device_work(events, steps, 25)
        row["launches"] = launch_split(everything, steps)
        trace.unlink()
    row["host_cumulative"] = _host_top(window.host, steps, "cum_ms", 60)
    row["host_self"] = _host_top(window.host, steps, "self_ms", 30)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(row, indent=1) + "\n")
    headline = {key: value for key, value in row.items() if not key.startswith("host_")}
    headline.pop("ops", None)
    if "device_work" in headline:  # the top kernels are in the file
        headline["device_work"] = {
            key: value for key, value in row["device_work"].items() if key != "top_kernels"
        }
    print(json.dumps(headline), flush=True)


if __name__ == "__main__":
    main()
