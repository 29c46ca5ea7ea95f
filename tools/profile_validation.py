"""Where a validation pass spends its time: loader wait, network, metric update, metric compute.

Issue 11 asks for validation at GPU speed; this measures today's split before anything changes.
It validates a ``yolo26n`` of one task on a synthetic validation split with Lightning's
``Trainer.validate`` (bf16 on a GPU), ``--repeats`` times after one warm-up pass (cache fill,
cuDNN autotuning), and times each phase with a CUDA synchronisation on both sides. The network is
first trained ``--train-epochs`` epochs on the synthetic training split: the metric's work
depends on how many predictions overlap a target, which a fresh network's hardly do.

- *wait*: from the end of one batch's work to the start of the next (the loader, Lightning);
- *network*: the evaluation forward (the image conversion and the EMA network's forward; replayed
  from CUDA graphs with ``--replay-evaluation``, which also keeps the module on the device between
  passes, as a fit does, so that the whole ``Trainer.validate`` then leaves out the move back);
- *update*: :meth:`Evaluator.update` (decode, per-image predictions and targets, matching);
- *compute*: :meth:`Evaluator.compute` at the epoch end (precision curves, mAP).

The synchronisations make the phases add up, at the cost of the overlap an unsynchronised pass
would have; the whole pass is also timed without them, twice: the *loop* from the first batch's
start to the epoch's end (what a fit pays per validation), and the whole ``Trainer.validate``
call, which also moves the module to the device and back to the CPU at its tear-down and starts
the loader's workers: costs a fit pays once, not per epoch (session 6 found them to be 2.4 s of a
5.9 s detect "pass" in the H200's cProfile). One more pass, untimed, runs with
torch's synchronisation debug mode on and counts every host synchronisation inside validation
batches, by call site (issue 11: the validation loop should not wait for the GPU). A cProfile
of one pass lists the host functions that take the time by their own time (on CPython 3.12 it
mixes other threads' events into the main thread's stack, so cumulative times overstate).
``--host-split`` times the parts of the metric's update by the main thread's wall clock
instead (``host_split.py``), over the timed
passes; ``--switch-intervals`` runs more passes alternating between interpreter switch intervals
and gives each its phases. With ``--device-profile`` one more
pass runs under torch's profiler, to say whether the pass waits for the GPU or the GPU for the
host: the GPU's busy seconds in the pass and its idle gaps (short and long, as
``profile_step.py`` splits them), the kernels that took the most time, and the operators
(eager: the metric's update; the replayed forward's kernels belong to graph launches) whose
kernels did. Prints a table; with ``$OUT`` set also
writes ``$OUT/profile_validation_<tasks>.json`` and ``$OUT/profile_validation_<tasks>.txt``
(the cProfiles and the synchronisation sites), so that runs of other tasks can share ``$OUT``.

Command (GPU machine, from the repository root)::

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 tools/profile_validation.py \\
        --tasks detect segment --images 128 --imgsz 640 --batch 16 --train-epochs 5
    # validation in batches of 16 (--batch, the data module's default); --val-batch N
    # segment as the benchmark fits it, trained by replayed steps, with the device's side:
    #   --tasks segment --batch 4 --train-epochs 8 --replay-training --replay-evaluation \\
    #   --device-profile

A CPU check with small numbers:
``--images 8 --imgsz 64 --batch 4 --repeats 1 --train-images 8 --train-epochs 1``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.profiler import ProfilerActivity, profile

from find_host_syncs import SYNC_WARNING
from host_split import HostSplit
from lucid_yolo.train import (
    ReplayConfig,
    YoloDataModule,
    YoloModule,
    evaluation,
    host_copy,
    source_mask_cache,
)
from lucid_yolo.train.data.dataset_yaml import Task
from lucid_yolo.train.data.synthetic import generate_synthetic
from lucid_yolo.train.metrics import match_replay, matched_records, mean_average_precision
from profile_step import busy_and_gaps, device_events, device_work, gap_split, ops_by_device_time
from row_replay import TRAINING_REPLAY

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


class LoopClock(pl.Callback):
    """Seconds of each validation loop, first batch's start to the epoch's end, synchronised."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._start: float | None = None

    def on_validation_batch_start(self, *args: Any) -> None:
        if self._start is None:
            _sync()
            self._start = time.perf_counter()

    def on_validation_epoch_end(self, *args: Any) -> None:
        _sync()
        if self._start is not None:
            self.seconds.append(time.perf_counter() - self._start)
        self._start = None


class SyncCounter(pl.Callback):
    """Host synchronisations inside validation batches (torch's sync debug mode), by call site."""

    def __init__(self) -> None:
        self.sites: Counter[tuple[str, ...]] = Counter()
        self.batches = 0
        self._previous = warnings.showwarning

    def _record(self, message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        if SYNC_WARNING not in str(message):
            self._previous(message, category, *args, **kwargs)
            return
        frames = traceback.extract_stack()[:-2]
        ours = [
            f"{Path(f.filename).name}:{f.lineno} {f.name}"
            for f in frames
            if "lucid_yolo" in f.filename or "lightning" in f.filename
        ]
        self.sites[tuple(ours[-4:])] += 1

    def on_validation_batch_start(self, *args: Any) -> None:
        warnings.showwarning = self._record
        torch.cuda.set_sync_debug_mode("warn")

    def on_validation_batch_end(self, *args: Any) -> None:
        torch.cuda.set_sync_debug_mode("default")
        warnings.showwarning = self._previous
        self.batches += 1

    def summary(self) -> dict[str, Any]:
        total = sum(self.sites.values())
        return {
            "batches": self.batches,
            "per_pass": total,
            "per_batch": total / max(1, self.batches),
            "sites": [[" <- ".join(reversed(site)), n] for site, n in self.sites.most_common()],
        }


def _callbacks(trainer: pl.Trainer) -> list[pl.Callback]:
    """The trainer's callback list, which Lightning's constructor sets without declaring it."""
    callbacks = getattr(trainer, "callbacks", None)
    if not isinstance(callbacks, list):
        raise TypeError(f"{type(trainer).__name__} has no callback list")
    return callbacks


def _count_syncs(trainer: pl.Trainer, module: YoloModule, data: YoloDataModule) -> dict[str, Any]:
    """Synchronisations of one validation pass (CUDA only; an empty summary on the CPU)."""
    counter = SyncCounter()
    if not torch.cuda.is_available():
        return counter.summary()
    _callbacks(trainer).append(counter)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        trainer.validate(module, data, verbose=False)
    _callbacks(trainer).remove(counter)
    return counter.summary()


UPDATE_PARTS: dict[Any, tuple[str, ...]] = {
    evaluation.Evaluator: (
        "_top_k",
        "_source_predictions",
        "_source_targets",
        "_score_waiting",
        "_target_masks",
    ),
    evaluation.SourceSizes: ("pack",),
    evaluation: (
        "_rows_that_can_pair",
        "_own",
        "_to_device",
        "resample_masks",
        "decode_dense",
        "topk_dense",
    ),
    host_copy.HostCopy: ("__init__", "read"),
    source_mask_cache.SourceMaskCache: ("masks",),
    mean_average_precision.MeanAveragePrecision: (
        "update_batch",
        "score_batch",
        "add_scored",
        "_check_class_ids",
        "_batch_overlaps",
        "_settle",
    ),
    mean_average_precision: (
        "_mask_overlaps",
        "box_overlaps",
        "_matching_order",
        "_rank_within_class",
        "match_extent",
    ),
    matched_records.PendingBatch: ("start", "finish"),
    match_replay.MatchReplay: ("__call__",),
}
"""The parts of the metric's update that ``--host-split`` times, by the class or module that
holds each (module functions where the caller looks them up)."""


def _instrumented(module: YoloModule, clock: PhaseClock) -> None:
    # the evaluation forward as the module calls it (a patched ``ema_net.forward`` would make a
    # replayed one retire)
    replay = module.replay
    replay.evaluate = clock.timed("network", replay.evaluate)  # type: ignore[method-assign]
    evaluator = module.evaluator
    evaluator.update = clock.timed("update", evaluator.update)  # type: ignore[method-assign]
    evaluator.compute = clock.timed("compute", evaluator.compute)  # type: ignore[method-assign]


def _by_switch_interval(
    trainer: pl.Trainer,
    module: YoloModule,
    data: YoloDataModule,
    clock: PhaseClock,
    args: argparse.Namespace,
) -> dict[str, dict[str, float]]:
    """Per interpreter switch interval, the mean pass and phases over ``--repeats`` passes each,
    the intervals alternating pass by pass (so that a drift of the machine touches them alike).

    The interval is how long a thread waiting for the interpreter lock waits before it asks the
    holder to drop it: every torch operator drops the lock while it runs, so with the loader's
    pin-memory thread in the process the main thread may wait up to an interval to get it back.
    """
    default = sys.getswitchinterval()
    result: dict[str, dict[str, float]] = {}
    try:
        for _ in range(args.repeats if args.switch_intervals else 0):
            for interval in args.switch_intervals:
                sys.setswitchinterval(interval)
                before = dict(clock.seconds)
                _sync()
                start = time.perf_counter()
                trainer.validate(module, data, verbose=False)
                _sync()
                entry = result.setdefault(f"{interval:g}", defaultdict(float))
                entry["pass"] += (time.perf_counter() - start) / args.repeats
                for phase, seconds in clock.seconds.items():
                    entry[phase] += (seconds - before.get(phase, 0.0)) / args.repeats
    finally:
        sys.setswitchinterval(default)
    return {interval: dict(phases) for interval, phases in result.items()}


def device_profile(trainer: pl.Trainer, module: YoloModule, data: YoloDataModule) -> dict[str, Any]:
    """One whole pass under torch's profiler: what the GPU did in it, and which operators'
    kernels took its time (the trace is read and dropped)."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as device:
        trainer.validate(module, data, verbose=False)
        _sync()
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "validation.json"
        device.export_chrome_trace(str(trace))
        events = device_events(trace)
    busy_ms, gaps = busy_and_gaps(events)
    return {
        "gpu_busy_s": round(busy_ms / 1000.0, 3),
        "gpu_idle_gaps": gap_split(gaps, 1),
        "device_work": device_work(events, 1, 15),
        "ops": ops_by_device_time(device, 1, 25),
    }


def profile_task(task: Task, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    data_yaml = generate_synthetic(
        root / task,
        task=task,
        num_train=args.train_images if args.train_epochs else 4,
        num_val=args.images,
        imgsz=args.imgsz,
    )
    data = YoloDataModule(
        data_yaml,
        imgsz=args.imgsz,
        batch_size=args.batch,
        val_batch_size=args.val_batch,
        workers=args.workers,
    )
    options: dict[str, Any] = {}
    if data.spec.kpt_shape is not None:  # the synthetic pose set has its own keypoint count
        options["kpt_shape"] = tuple(data.spec.kpt_shape)
    if args.replay_training:
        options["replay"] = ReplayConfig(**TRAINING_REPLAY, evaluation=args.replay_evaluation)
    elif args.replay_evaluation:
        options["replay"] = ReplayConfig(evaluation=True)
    module = YoloModule(f"yolo26n{SUFFIX[task]}", num_classes=data.num_classes, **options)
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
    if args.mask_scratch == "off":
        module.evaluator.metric.mask_scratch = contextlib.nullcontext
    if args.replay_evaluation:
        # Each Trainer.validate moves the module to the CPU at its end (Strategy.teardown), and
        # the evaluation graph of the moved network is recorded again at the next pass: kept on
        # the device, as in a fit, every timed pass replays.
        module.cpu = lambda: module  # type: ignore[method-assign]
    trainer.validate(module, data, verbose=False)
    if cuda:  # the peak of the passes, not of the training before them
        torch.cuda.reset_peak_memory_stats()
    plain = []
    loops = LoopClock()
    _callbacks(trainer).append(loops)
    for _ in range(args.repeats):
        _sync()
        start = time.perf_counter()
        trainer.validate(module, data, verbose=False)
        _sync()
        plain.append(time.perf_counter() - start)
    _callbacks(trainer).remove(loops)
    on_device = device_profile(trainer, module, data) if args.device_profile and cuda else None
    syncs = _count_syncs(trainer, module, data)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    clock = PhaseClock()
    _callbacks(trainer).append(clock)
    _instrumented(module, clock)
    split = HostSplit()
    try:
        if args.host_split:
            split.wrap_all((owner, name) for owner, names in UPDATE_PARTS.items() for name in names)
        for _ in range(args.repeats):
            trainer.validate(module, data, verbose=False)
    finally:
        split.restore()
    phases = {k: v / args.repeats for k, v in clock.seconds.items()}
    by_interval = _by_switch_interval(trainer, module, data, clock, args)
    profiler = cProfile.Profile()
    profiler.enable()
    trainer.validate(module, data, verbose=False)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    loan = module.replay.evaluation_loan
    return {
        "task": task,
        "images": args.images,
        "imgsz": args.imgsz,
        "batch": args.batch,
        "val_batch": data.val_batch_size,
        "train_epochs": args.train_epochs,
        "pass_seconds": sorted(plain),
        "loop_seconds": sorted(loops.seconds),
        "phase_seconds": phases,
        "host_split": split.table(args.repeats),
        "by_switch_interval": by_interval,
        "host_syncs": syncs,
        "device_profile": on_device,
        "metrics": metrics,
        "mask_scratch": args.mask_scratch,
        "loan_blocks": loan.borrowed if loan is not None else None,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
        "cprofile": text.getvalue(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["detect"], choices=list(SUFFIX))
    parser.add_argument("--images", type=int, default=128, help="validation images")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=16, help="training batch")
    parser.add_argument(
        "--val-batch", type=int, default=None, help="validation batch (default: --batch)"
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-epochs", type=int, default=0, help="train first (see above)")
    parser.add_argument("--train-images", type=int, default=512)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    parser.add_argument(
        "--replay-evaluation",
        action="store_true",
        help="replay the evaluation forward from CUDA graphs (--model.replay.evaluation)",
    )
    parser.add_argument(
        "--replay-training",
        action="store_true",
        help="train with every region replayed, as the benchmark's fits (a faster --train-epochs)",
    )
    parser.add_argument(
        "--mask-scratch",
        choices=["loan", "off"],
        default="loan",
        help="where the metric builds a batch's masks in a replayed fit: the graph pool's loan "
        "(the module's default) or beside the pool (off), to time what the loan costs; the "
        "report's loan_blocks counts every borrowing block (the eager forwards' too)",
    )
    parser.add_argument(
        "--device-profile", action="store_true", help="one more pass under torch's profiler (GPU)"
    )
    parser.add_argument(
        "--host-split",
        action="store_true",
        help="the timed passes' wall seconds in each part of the metric's update (host_split.py)",
    )
    parser.add_argument(
        "--switch-intervals",
        type=float,
        nargs="*",
        default=[],
        help="after the timed passes, --repeats more per interpreter switch interval (seconds), "
        "alternating: the phases per interval",
    )
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-profile-validation"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(os.environ["OUT"]) if "OUT" in os.environ else None
    results = []
    for task in args.tasks:
        result = profile_task(task, args, args.root)
        results.append(result)
        loop, whole = (
            statistics.median(result[key]) if result[key] else float("nan")
            for key in ("loop_seconds", "pass_seconds")
        )
        phases = ", ".join(f"{k} {v:.3f} s" for k, v in result["phase_seconds"].items())
        syncs = result["host_syncs"]
        print(
            f"{task}: validation loop {loop:.3f} s, batches of {result['val_batch']} (the whole "
            f"Trainer.validate {whole:.3f} s; medians of {args.repeats}); {phases}; "
            f"host syncs {syncs['per_pass']} per pass ({syncs['per_batch']:.1f} per batch)"
        )
        for site, n in syncs["sites"]:
            print(f"  {n:6d} sync(s) at {site}")
        for interval, seen in result["by_switch_interval"].items():
            parts = ", ".join(f"{k} {v:.3f} s" for k, v in seen.items())
            print(f"  switch interval {interval} s: {parts}")
        for part in result["host_split"]:
            print(
                f"  {part['seconds_per_pass']:7.4f} s a pass in {part['calls_per_pass']:6.0f} "
                f"call(s)  {part['function']}"
            )
        if result["device_profile"] is not None:
            seen = result["device_profile"]
            work, gaps = seen["device_work"], seen["gpu_idle_gaps"]
            print(
                f"  one pass under the profiler: GPU busy {seen['gpu_busy_s']:.3f} s, "
                f"{work['per_step']['kernel']:.0f} kernels ({work['kernel_ms']:.1f} ms), idle "
                f"gaps under {gaps['under_us']:.0f} µs {gaps['short_ms']:.1f} ms, longer "
                f"{gaps['long_ms']:.1f} ms ({gaps['long_per_step']:.0f})"
            )
            for op in seen["ops"][:12]:
                print(f"    {op['device_ms']:8.2f} ms  {op['calls']:7.0f}x  {op['op']}")
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            name = "_".join(args.tasks)
            summary = [{k: v for k, v in r.items() if k != "cprofile"} for r in results]
            (out / f"profile_validation_{name}.json").write_text(json.dumps(summary, indent=1))
            with (out / f"profile_validation_{name}.txt").open("a") as file:
                sites = "\n".join(f"{n:6d}  {site}" for site, n in syncs["sites"])
                file.write(f"=== {task}: host syncs\n{sites}\n")
                file.write(f"=== {task}: cProfile\n{result['cprofile']}\n")


if __name__ == "__main__":
    main()
