"""Peak CUDA memory of a replayed fit against a native one, each fit in a fresh process.

Issue 11 asks for the peak reserved memory of a replayed fit within 1.10× of native. The caching
allocator keeps what one fit reserved for the next fit of the same process, and graph pools live
as long as their graphs, so every run here is its own process (``--child``): the parent only
generates the data, starts the runs in alternating order and gathers their JSON.

A run fits ``--steps`` optimizer steps of a fresh YOLO26n-class model (validation off, or with
``--validate N`` that many batches of ``--val-images`` validated at each epoch's end, and
Lightning's sanity check of ``min(2, N)`` batches before training, at the data module's
validation batch size), natively or with every region replayed as the side-by-side benchmark
replays them (the network, a segment net's heads in it, and its loss as one region; the update
and EMA blend; the evaluation). A replayed fit's sanity check runs the
evaluation forward natively and the evaluation graph records at the first validation after the
training graphs, so a run that ends before its first epoch ends holds none. It records:

- peak reserved and peak allocated bytes (``torch.cuda.max_memory_reserved`` and
  ``max_memory_allocated``) and a few ``torch.cuda.memory_stats`` counters;
- per step, the reserved and allocated bytes and their running peaks, so the step that set the
  peak (the recording step, or the steady state) can be read off, and the same before and after
  every recording (region or update), so the recording that set it can be too;
- at the end, the allocator's segments grouped by owner: each graph private pool, and outside the
  pools each stream (a warm-up on a side stream leaves blocks there that the default stream can
  never reuse), with reserved and allocated bytes each;
- the replay telemetry (recordings, replays, ``pool_bytes``);
- for a replayed fit without ``--history``, what the evaluation loan's reading of the graph
  pool's live blocks (``ReplayPool.live_blocks``, an allocator snapshot, taken twice a
  validation pass) costs in the state the fit ends in: the median of five, in ms;
- with ``--history``, the allocator's trace replayed on the host (:mod:`memory_trace`): at the
  peak allocated, at the peak reserved, and at the peak outside the graph pools during the last
  step, the blocks alive then by owner and allocation site, which names the code path (warm-up,
  capture, replayed backward, data path) that held the bytes.

The Markdown report (``replay_memory.md``) also splits each replayed peak reserved into the graph
pool and the rest, beside what the 1.10 goal leaves outside that pool (:func:`budget`).

``--jobs`` runs that many fits at once: each is its own process, so memory numbers do not depend
on the others (times do, and this tool reports none).

The fits here are the Trainer's, without the CLI, so they run with PyTorch's allocator settings
as the environment gives them; ``lucid-yolo`` commands give the allocator expandable segments
(:mod:`lucid_yolo.cli.cuda_allocator`), so export
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` to measure what a CLI fit reserves.

``--device cpu`` is the smoke mode the CPU suite runs: the same processes and JSON with the
replay library's CPU stand-in, and ``null`` for every CUDA number.

Example (GPU machine, from the repository root; about a minute per case)::

    export PYTHONPATH=$(ls -d packages/*/src | paste -sd:)
    python3 tools/bench_replay_memory.py --cases detect:16 detect:4 segment:4 --steps 30 \\
        --out $OUT/replay_memory
    python3 tools/bench_replay_memory.py --cases detect:16 --steps 8 --history --jobs 2 \\
        --out $OUT/replay_memory_sites
    python3 tools/bench_replay_memory.py --cases detect:16 --steps 24 --images 128 \\
        --validate 4 --val-images 128 --history --jobs 2 --out $OUT/replay_memory_val
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import timeit
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

MODES = ("native", "replay")
MODELS = {
    "detect": "yolo26n",
    "segment": "yolo26n-seg",
    "pose": "yolo26n-pose",
    "obb": "yolo26n-obb",
}
STATS = (
    "reserved_bytes.all.peak",
    "allocated_bytes.all.peak",
    "active_bytes.all.peak",
    "requested_bytes.all.peak",
    "inactive_split_bytes.all.peak",
    "segment.all.peak",
    "num_alloc_retries",
    "num_device_alloc",
    "num_device_free",
)
"""``torch.cuda.memory_stats`` keys kept in the JSON."""
GIB = 2**30
GOAL = 1.10
"""Issue 11: a replayed fit's peak reserved memory at most this many times native's."""


# ---------------------------------------------------------------------------- one fit (child)


def segments_by_owner(segments: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Reserved and allocated bytes of allocator segments, per graph pool or per stream.

    Args:
        segments: ``torch.cuda.memory_snapshot()`` entries (``total_size``, ``allocated_size``,
            ``stream``, ``segment_pool_id``).

    Returns:
        ``{"pool (a, b)": {...}, "stream <id>": {...}}``, each with ``reserved``, ``allocated``
        and ``segments``: a segment with a pool id other than ``(0, 0)`` belongs to a graph
        private pool, any other one to the stream it was cut for.
    """
    owners: dict[str, dict[str, int]] = defaultdict(
        lambda: {"reserved": 0, "allocated": 0, "segments": 0}
    )
    for segment in segments:
        pool = tuple(segment.get("segment_pool_id", (0, 0)))
        owner = f"pool {pool}" if pool != (0, 0) else f"stream {segment.get('stream', 0)}"
        owners[owner]["reserved"] += int(segment["total_size"])
        owners[owner]["allocated"] += int(segment["allocated_size"])
        owners[owner]["segments"] += 1
    return dict(owners)


def _memory() -> dict[str, int]:
    import torch

    return {
        "reserved": torch.cuda.memory_reserved(),
        "allocated": torch.cuda.memory_allocated(),
        "peak_reserved": torch.cuda.max_memory_reserved(),
        "peak_allocated": torch.cuda.max_memory_allocated(),
    }


def _mark_step() -> None:
    """A one-element allocation whose stack names this function: a step boundary in the trace."""
    import torch

    torch.empty(1, device="cuda")


def _is_step_marker(event: dict[str, Any]) -> bool:
    return event["action"] == "alloc" and any(
        frame.get("name") == "_mark_step" for frame in event.get("frames", ())
    )


def _attribution(max_entries: int) -> dict[str, Any]:
    """The allocator trace of this process, attributed at its peaks (:mod:`memory_trace`)."""
    import torch

    from memory_trace import attribute, pool_ranges

    snapshot = torch.cuda.memory._snapshot()
    trace = snapshot["device_traces"][torch.cuda.current_device()]
    report = attribute(trace, pool_ranges(snapshot["segments"]), _is_step_marker)
    report["truncated"] = len(trace) >= max_entries
    return report


def _watch_recordings(log: list[dict[str, Any]]) -> None:
    """Record the memory before and after every recording (region and update) into ``log``.

    A benchmark-only wrapper around the recorders' recording methods: a recording whose
    ``after.peak_reserved`` exceeds its ``before.peak_reserved`` set the fit's running peak.
    """
    from lucid_yolo.replay import RegionRecorder, UpdateRecorder

    def watched(name_of: Any, method: Any) -> Any:
        def record(self: Any, *args: Any) -> Any:
            before = _memory()
            result = method(self, *args)
            log.append({"recorder": name_of(self), "before": before, "after": _memory()})
            return result

        return record

    for cls, method_name in ((RegionRecorder, "_record_or_retire"), (UpdateRecorder, "_record")):
        setattr(cls, method_name, watched(lambda r: r.name, getattr(cls, method_name)))


def _fit(args: argparse.Namespace) -> dict[str, Any]:
    """Fit ``args.steps`` steps in this process and return what it measured."""
    import lightning.pytorch as pl
    import torch

    from bench_trainer import step_trainer
    from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
    from row_replay import ROW_REPLAY

    cuda = args.device == "cuda"
    history = cuda and args.history
    if history:
        # Before anything is allocated, so the trace's running sums start from zero.
        torch.cuda.memory._record_memory_history(max_entries=args.history_entries, stacks="python")

    class MemoryProbe(pl.Callback):
        def __init__(self) -> None:
            self.steps: list[dict[str, int]] = []
            self.validations = 0

        def on_validation_end(self, *_: Any) -> None:
            self.validations += 1

        def on_train_batch_end(self, *_: Any) -> None:
            if cuda:
                self.steps.append(_memory())
            if history:
                _mark_step()

    recordings: list[dict[str, Any]] = []
    if cuda:
        _watch_recordings(recordings)
    pl.seed_everything(0)
    replay = args.mode == "replay"
    data = YoloDataModule(
        args.data, task=args.task, imgsz=args.imgsz, batch_size=args.batch, workers=args.workers
    )
    config = ReplayConfig(**ROW_REPLAY) if replay else ReplayConfig()
    options: dict[str, Any] = {}
    if args.task == "pose":
        kpt_shape = data.spec.kpt_shape
        if kpt_shape is None:
            raise ValueError(f"{args.data}: a pose set without kpt_shape")
        options["kpt_shape"] = kpt_shape
    module = YoloModule(MODELS[args.task], num_classes=data.num_classes, replay=config, **options)
    probe = MemoryProbe()
    trainer = step_trainer(
        args.steps,
        probe,
        "gpu" if cuda else "cpu",
        "bf16-mixed" if cuda else "32-true",
        val_batches=args.validate,
    )
    trainer.fit(module, data)
    result: dict[str, Any] = {
        "task": args.task,
        "batch": args.batch,
        "imgsz": args.imgsz,
        "mode": args.mode,
        "steps": args.steps,
        "validate": args.validate,
        "validations": probe.validations,
        "regions": {k: v for k, v in vars(config).items() if isinstance(v, bool)},
        "telemetry": module.replay_telemetry.as_dict(),
        "peak_reserved": None,
        "peak_allocated": None,
        "stats": None,
        "per_step": probe.steps,
        "recordings": recordings,
        "owners_at_end": None,
        "attribution": None,
        "loan_reading_ms": None,
    }
    if cuda:
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        result["peak_reserved"] = torch.cuda.max_memory_reserved()
        result["peak_allocated"] = torch.cuda.max_memory_allocated()
        result["stats"] = {k: stats.get(k) for k in STATS}
        snapshot = torch.cuda.memory_snapshot()  # type: ignore[no-untyped-call]
        result["owners_at_end"] = segments_by_owner(snapshot)
        loan = module.replay.evaluation_loan
        if loan is not None and loan.pool.holds_graphs and not history:
            readings = timeit.repeat(loan.pool.live_blocks, number=1, repeat=5)
            result["loan_reading_ms"] = 1000.0 * statistics.median(readings)
    if history:
        try:
            result["attribution"] = _attribution(args.history_entries)
        except Exception as error:  # the peaks above must survive a trace this tool misreads
            result["attribution"] = {"error": repr(error)}
    return result


# ---------------------------------------------------------------------------- runs (parent)


def ratios(native: dict[str, Any], replay: dict[str, Any]) -> dict[str, float | None]:
    """Replay / native of the peak reserved and the peak allocated bytes (``None`` on CPU)."""
    out: dict[str, float | None] = {}
    for key in ("peak_reserved", "peak_allocated"):
        a, b = native.get(key), replay.get(key)
        out[key] = round(b / a, 3) if a and b is not None else None
    return out


def _run(args: argparse.Namespace, data: Path, task: str, batch: int, mode: str) -> dict[str, Any]:
    """One fit in a fresh process; its JSON, or the error and the tail of its output."""
    out = args.out / f"{task}_b{batch}_{mode}.json"
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--task", task,
        "--batch", str(batch),
        "--mode", mode,
        "--data", str(data),
        "--imgsz", str(args.imgsz),
        "--steps", str(args.steps),
        "--validate", str(args.validate),
        "--workers", str(args.workers),
        "--device", args.device,
        "--history-entries", str(args.history_entries),
        "--out", str(out),
        *(["--history"] if args.history else []),
    ]  # fmt: skip
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=args.timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"task": task, "batch": batch, "mode": mode, "error": f"timeout {args.timeout} s"}
    if done.returncode != 0 or not out.exists():
        tail = (done.stdout + done.stderr)[-2000:]
        return {"task": task, "batch": batch, "mode": mode, "error": tail}
    result: dict[str, Any] = json.loads(out.read_text())
    result["wall_s"] = round(time.perf_counter() - start, 2)
    return result


def _gib(value: int | None) -> str:
    return "—" if value is None else f"{value / GIB:.3f}"


def table(cases: list[dict[str, Any]]) -> str:
    """Markdown: per case, native and replayed peaks and their ratios."""
    lines = [
        "| case | native reserved GiB | replay reserved GiB | ratio | native allocated GiB "
        "| replay allocated GiB | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        native, replay, ratio = case["native"], case["replay"], case["ratio"]
        lines.append(
            f"| {case['task']} b{case['batch']} | {_gib(native.get('peak_reserved'))} "
            f"| {_gib(replay.get('peak_reserved'))} | {ratio['peak_reserved']} "
            f"| {_gib(native.get('peak_allocated'))} | {_gib(replay.get('peak_allocated'))} "
            f"| {ratio['peak_allocated']} |"
        )
    return "\n".join(lines)


def budget(native: dict[str, Any], replay: dict[str, Any]) -> dict[str, Any] | None:
    """Where the replayed fit's peak reserved bytes sit, against what :data:`GOAL` allows.

    The graph pool is read from the allocator trace at the peak when there is one, else from
    the replay telemetry's ``pool_bytes`` (the pool at the end of the fit, which stops growing
    after the last recording). ``allowed_outside_pool`` is what the goal leaves beside that
    pool; ``step`` is the first step whose running peak reached the fit's peak. ``None``
    without CUDA numbers.
    """
    native_peak, replay_peak = native.get("peak_reserved"), replay.get("peak_reserved")
    if not native_peak or replay_peak is None:
        return None
    owners = ((replay.get("attribution") or {}).get("reserved") or {}).get("reserved_by_owner")
    if owners:
        pool = sum(v for owner, v in owners.items() if owner.startswith("pool"))
    else:
        pool = replay["telemetry"]["pool_bytes"]
    steps = [i + 1 for i, m in enumerate(replay["per_step"]) if m["peak_reserved"] >= replay_peak]
    return {
        "step": steps[0] if steps else None,
        "pool": pool,
        "outside_pool": replay_peak - pool,
        "allowed_outside_pool": int(GOAL * native_peak) - pool,
    }


def budget_table(cases: list[dict[str, Any]]) -> str:
    """Markdown: per case, the replayed peak split into the graph pool and the rest."""
    lines = [
        f"| case | step of the replayed peak | graph pool GiB | outside the pool GiB "
        f"| allowed outside the pool at {GOAL}x GiB |",
        "|---|---|---|---|---|",
    ]
    for case in cases:
        found = budget(case["native"], case["replay"])
        if found is not None:
            lines.append(
                f"| {case['task']} b{case['batch']} | {found['step']} | {_gib(found['pool'])} "
                f"| {_gib(found['outside_pool'])} | {_gib(found['allowed_outside_pool'])} |"
            )
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def loan_lines(cases: list[dict[str, Any]]) -> str:
    """Markdown: per replayed fit that measured it, the evaluation loan's pool reading."""
    lines = [
        f"- {case['task']} b{case['batch']}: the evaluation loan's reading of the pool's live "
        f"blocks took {case['replay']['loan_reading_ms']:.2f} ms at the fit's end (read twice a "
        "validation pass)"
        for case in cases
        if case["replay"].get("loan_reading_ms") is not None
    ]
    return "\n" + "\n".join(lines) + "\n" if lines else ""


def site_tables(cases: list[dict[str, Any]], rows: int = 10) -> str:
    """Markdown: per fit with ``--history``, the largest allocation sites at each peak."""
    parts = []
    for case in cases:
        for mode in MODES:
            attribution = case[mode].get("attribution")
            if not attribution:
                continue
            for peak in ("allocated", "reserved", "outside_pools_last_step"):
                found = attribution.get(peak)
                if not found or found.get("index", -1) < 0:
                    continue
                parts += [
                    f"\n{case['task']} b{case['batch']} {mode}, peak {peak}: "
                    f"{_gib(found['bytes'])} GiB in step {found['step']}\n",
                    "| owner | site | GiB | blocks |",
                    "|---|---|---|---|",
                    *(
                        f"| {r['owner']} | `{r['site']}` | {_gib(r['bytes'])} | {r['blocks']} |"
                        for r in found["sites"][:rows]
                    ),
                ]
    return "\n".join(parts) + "\n" if parts else ""


def _parent(args: argparse.Namespace) -> dict[str, Any]:
    from lucid_yolo.train.data.synthetic import generate_synthetic

    args.out.mkdir(parents=True, exist_ok=True)
    parsed = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cases]
    datasets = {
        task: generate_synthetic(
            args.root / task,
            task=task,
            num_train=args.images,
            num_val=args.val_images,
            imgsz=args.imgsz,
        )
        for task in dict.fromkeys(task for task, _ in parsed)
    }
    fits = [
        (task, batch, mode)
        for index, (task, batch) in enumerate(parsed)
        for mode in (MODES if index % 2 == 0 else MODES[::-1])
    ]
    with ThreadPoolExecutor(max_workers=args.jobs) as executor:
        futures = {fit: executor.submit(_run, args, datasets[fit[0]], *fit) for fit in fits}
        results = {fit: future.result() for fit, future in futures.items()}
    cases = []
    for task, batch in parsed:
        runs = {mode: results[(task, batch, mode)] for mode in MODES}
        print(json.dumps({"case": f"{task}:{batch}", **runs}), flush=True)
        cases.append(
            {
                "task": task,
                "batch": batch,
                **runs,
                "ratio": ratios(runs["native"], runs["replay"]),
            }
        )
    report = {
        "imgsz": args.imgsz,
        "steps": args.steps,
        "validate": args.validate,
        "device": args.device,
        "cases": cases,
    }
    (args.out / "replay_memory.json").write_text(json.dumps(report, indent=1))
    summary = table(cases) + "\n\n" + budget_table(cases) + loan_lines(cases)
    (args.out / "replay_memory.md").write_text(summary + site_tables(cases))
    print(summary, flush=True)
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["detect:16", "detect:4", "segment:4"])
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--val-images", type=int, default=2)
    parser.add_argument(
        "--validate", type=int, default=0, help="validation batches at each epoch's end (0: off)"
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per fit")
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-replay-memory"))
    parser.add_argument("--jobs", type=int, default=1, help="fits run at once")
    parser.add_argument(
        "--history", action="store_true", help="attribute the peaks from the allocator trace"
    )
    parser.add_argument("--history-entries", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.out.write_text(json.dumps(_fit(args)))
        return
    _parent(args)


if __name__ == "__main__":
    main()
