"""Where a benchmark fit's training seconds go besides its steady steps.

``tools/bench_side_by_side.py`` reports ``train_s``: the fit's wall time from its first batch,
less validation. At batch 4 the replayed detect fit's ``train_s`` per step was about 31 ms in
session 6, while the same step in a bare fit (``tools/probe_loader_thread.py``: validation off,
no CLI callbacks) takes 20.7 ms on the H200. This tool runs the benchmark's own fit
(``bench_side_by_side.lucid_fit_arguments``: the packaged config, replay flags, no progress bar;
the CLI's callbacks, logger and checkpoints) with one more callback, :class:`FitGaps`, that
splits every epoch at its hooks:

* ``first_s``: the epoch's start to its first batch's end (the first fetch after the turnover,
  and the first step);
* ``steps_s`` and ``period_ms``: the first batch's end to the last one's, and per step: steady
  steps (the device synchronised at both ends, the only synchronisations the probe adds);
* ``to_val_s``: the last batch's end to validation's start;
* ``val_s``: validation (as the benchmark counts it);
* ``turnover_s``: validation's end to the next epoch's start (the fit's end after the last
  epoch): epoch-end hooks, logging, checkpoints;
* ``checkpoint_s``: of that, the time in ``Trainer.save_checkpoint`` (best and last);
* ``step_ms`` and ``between_ms``: medians on the device's timeline (CUDA events on the current
  stream; host clocks on a CPU fit) of a step, from ``on_train_batch_start`` to
  ``on_train_batch_end`` (the steps after the epoch's first), and of the time from one step's
  end to the next one's start (every gap of the epoch but the first). Lightning copies the batch
  to the device and runs the data module's ``on_after_batch_transfer`` (the device pixels) before
  ``on_train_batch_start``, so ``between_ms`` is that device work plus any time the device
  waited for the host: the part of ``period_ms`` that no step phase holds. ``step_mean_ms``,
  ``step_p90_ms`` and ``step_max_ms`` (and the same of ``between``) describe the tail: the
  means add up to ``period_ms`` (with the first gap's share), the medians need not, so a mean
  well above its median says that a few long steps, not every step, hold the difference;
* ``first_gap_ms``: the gap after the epoch's first step, apart, because the probe itself
  synchronises the device there: with no queued work left, whatever the host does next (at an
  epoch's start Lightning's fetcher also takes the batch after the next) is device idle that a
  fit without the probe would partly cover;
* ``host_wait_*_ms``: the same statistics, over the same gaps, of the host's time from one
  step's end hook to the next one's start hook (the fetch, the copy's launch and the device
  pixels' launches; what ``PhaseTimer`` reports as data wait, as a mean);
* ``gc_count``, ``gc_full`` (of them, collections of the oldest generation), ``gc_ms`` and
  ``gc_max_ms``: CPython's garbage collections between the epoch's first and last step (every
  one pauses the thread that launches the steps).

``lucid-yolo fit`` freezes the set-up's objects out of CPython's collections when training
starts (``SetUpObjectsFrozen``, session 17); the fit's log says, at the first epoch's start, how
many objects the permanent generation holds (the frozen ones; under CPython 3.12 also the
immortal objects a collection met, 375 in a fresh interpreter), how many the oldest generation
holds, and how long the hooks from training's start to there took (the collection before the
freeze among them). With
``--no-freeze`` the probe turns that callback's freeze off, for the comparison of two fits that
session 17 ran with this probe's former ``--gc-freeze`` (its own freeze, before the CLI had one).
Whether the checkpoint writer's thread stretches the steps it overlaps is
``tools/probe_checkpoint_cost.py``'s question (``slowed per save``).

With ``--profile`` the fit also runs cProfile over its first two training steps (where the
replayed fit records its graphs; the second step took 0.8-0.9 s on the H200 in session 8) and
over each turnover (validation's end to the next epoch's start: the epoch-end hooks, logging and
the checkpoint saves, so ``Trainer.save_checkpoint`` shows there with what it calls), and writes
the top functions by cumulative time to ``first_steps.txt`` and ``turnover.txt``.

``train_s`` (the benchmark's) is the sum of all but ``val_s``. Each row also gives each part per
training step, so the parts say where ``train_s / steps`` exceeds the steady period.

Run (GPU machine, from source; ``$OUT/fit_gap.json`` and ``.md``)::

    python3 tools/probe_fit_gap.py --batch 4 --epochs 6
    python3 tools/probe_fit_gap.py --task segment --batch 4 --epochs 6   # with the segment heads

On a machine without CUDA the fit runs on the CPU, natively (the CLI refuses replay there; a
smoke test: ``--native --imgsz 64 --images 8 --val-images 4 --epochs 2 --batch 2``).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import itertools
import json
import math
import os
import pstats
import statistics
import subprocess
import sys
import time
from functools import wraps
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from lucid_yolo.train.callbacks import SetUpObjectsFrozen
from lucid_yolo.train.callbacks.device_clock import DeviceClock

GAPS_ENV = "LUCID_FIT_GAPS"
"""Environment variable naming the JSON file :class:`FitGaps` writes."""
PROFILE_ENV = "LUCID_FIT_GAPS_PROFILE"
"""Environment variable naming a folder: :class:`FitGaps` then also profiles (cProfile) the first
training step and every ``Trainer.save_checkpoint``, and writes their top functions there."""
NO_FREEZE_ENV = "LUCID_FIT_GAPS_NO_FREEZE"
"""Environment variable: when ``1``, :class:`FitGaps` turns the fit's ``SetUpObjectsFrozen`` off."""
TOOLS_DIR = Path(__file__).resolve().parent
TIMELINE = ("step", "between", "host_wait")
"""The per-step series each epoch describes by its median, mean, 90th percentile and maximum."""
STATISTICS = ("", "_mean", "_p90", "_max")
"""Key suffixes of :func:`_describe`: ``<series><suffix>_ms``; the bare one is the median."""
TIMELINE_KEYS = (*(f"{name}{stat}_ms" for name in TIMELINE for stat in STATISTICS), "first_gap_ms")


def _sync() -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()


def _now() -> DeviceClock:
    """Now on the device's timeline (the host's on a CPU fit)."""
    return DeviceClock(torch.cuda.is_available())


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _describe(name: str, values: list[float]) -> dict[str, float | None]:
    """``<name>_ms`` (the median, the name earlier reports used), ``_mean``, ``_p90`` (nearest
    rank) and ``_max``; ``None`` each without values."""
    ordered = sorted(values)
    if not ordered:
        return dict.fromkeys((f"{name}{stat}_ms" for stat in STATISTICS), None)
    values_of = (
        statistics.median(ordered),
        statistics.fmean(ordered),
        ordered[math.ceil(0.9 * len(ordered)) - 1],
        ordered[-1],
    )
    return {f"{name}{stat}_ms": value for stat, value in zip(STATISTICS, values_of, strict=True)}


class GcPauses:
    """CPython's garbage collections while armed: how many, of which generation, how long."""

    KEYS = ("gc_count", "gc_full", "gc_ms", "gc_max_ms")
    """The keys of :meth:`take`."""

    def __init__(self) -> None:
        self.armed = False
        self._began: float | None = None
        self.pauses_ms: list[float] = []
        self.full = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if not self.armed:
            return
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began is not None:
            self.pauses_ms.append((time.perf_counter() - self._began) * 1000.0)
            self.full += info["generation"] == 2
            self._began = None

    def take(self) -> dict[str, float]:
        """The collections since the last take, then forget them."""
        pauses, full = self.pauses_ms, self.full
        self.pauses_ms, self.full = [], 0
        values = (len(pauses), full, sum(pauses), max(pauses, default=0.0))
        return dict(zip(self.KEYS, values, strict=True))


class FitGaps(pl.Callback):
    """Times each training epoch's parts at its hooks; writes them at the fit's end.

    Add it to a CLI fit with ``--trainer.callbacks+=probe_fit_gap.FitGaps`` (``tools/`` on
    ``PYTHONPATH``, the output file in ``$LUCID_FIT_GAPS``). It measures and changes nothing the
    fit computes; it synchronises the device at each epoch's first and last batch end.
    """

    def __init__(self) -> None:
        self.epochs: list[dict[str, float | None]] = []
        self._marks: dict[str, float] = {}
        self._step_clocks: list[tuple[DeviceClock, DeviceClock | None]] = []
        self._host_waits: list[float] = []
        self._last_end_host: float | None = None
        self._gc = GcPauses()
        self._train_start: float | None = None
        self._checkpoint_s = 0.0
        folder = os.environ.get(PROFILE_ENV)
        self._profile_dir = Path(folder) if folder else None
        self._first_steps = cProfile.Profile()
        self._turnover = cProfile.Profile()

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        save = trainer.save_checkpoint

        @wraps(save)
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return save(*args, **kwargs)
            finally:
                self._checkpoint_s += time.perf_counter() - began

        trainer.save_checkpoint = timed  # type: ignore[method-assign]
        gc.callbacks.append(self._gc)
        if os.environ.get(NO_FREEZE_ENV) == "1":
            for callback in trainer.callbacks:  # type: ignore[attr-defined]
                if isinstance(callback, SetUpObjectsFrozen):
                    callback.on_train_start = _skip_hook  # type: ignore[method-assign]
                    print("probe: SetUpObjectsFrozen turned off", file=sys.stderr)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._gc in gc.callbacks:
            gc.callbacks.remove(self._gc)

    def on_train_start(self, trainer: pl.Trainer, *_: Any) -> None:
        self._train_start = time.perf_counter()

    def on_train_epoch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        if self._train_start is not None:
            hooks_ms = (time.perf_counter() - self._train_start) * 1000.0
            self._train_start = None
            print(
                f"probe: at the first epoch's start {gc.get_freeze_count()} objects in the "
                f"permanent generation (frozen), "
                f"{len(gc.get_objects(generation=2))} in the oldest generation; the hooks since "
                f"training's start took {hooks_ms:.1f} ms",
                file=sys.stderr,
            )
        self._turnover.disable()
        self._close_epoch(time.perf_counter())
        self._marks = {"start": time.perf_counter()}
        self._step_clocks = []
        self._host_waits = []
        self._last_end_host = None
        self._checkpoint_s = 0.0

    def on_train_batch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        if self._last_end_host is not None:
            self._host_waits.append((time.perf_counter() - self._last_end_host) * 1000.0)
        self._step_clocks.append((_now(), None))
        if self._profile_dir is not None and trainer.global_step < 2:
            self._first_steps.enable()

    def on_train_batch_end(
        self, trainer: pl.Trainer, module: Any, _out: Any, _batch: Any, batch_idx: int
    ) -> None:
        self._first_steps.disable()
        if self._step_clocks:
            self._step_clocks[-1] = (self._step_clocks[-1][0], _now())
        if batch_idx == 0:
            self._marks["first_end"] = _sync()
            self._marks["late_waits_first"] = _late_check_waits(module)
            self._gc.take()
            self._gc.armed = True
        if batch_idx + 1 == trainer.num_training_batches:
            self._gc.armed = False
            self._marks["last_end"] = _sync()
            self._marks["steps"] = batch_idx
            self._marks["late_waits_last"] = _late_check_waits(module)
        self._last_end_host = time.perf_counter()

    def on_validation_start(self, trainer: pl.Trainer, *_: Any) -> None:
        if not trainer.sanity_checking:
            self._marks["val_start"] = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, *_: Any) -> None:
        if not trainer.sanity_checking:
            self._marks["val_end"] = time.perf_counter()
            if self._profile_dir is not None:
                self._turnover.enable()

    def on_fit_end(self, trainer: pl.Trainer, *_: Any) -> None:
        self._turnover.disable()
        self._close_epoch(_sync())
        path = os.environ.get(GAPS_ENV)
        if path and trainer.is_global_zero:
            Path(path).write_text(json.dumps(self.epochs, indent=1) + "\n")
        if self._profile_dir is not None and trainer.is_global_zero:
            self._profile_dir.mkdir(parents=True, exist_ok=True)
            for name, profile in (
                ("first_steps", self._first_steps),
                ("turnover", self._turnover),
            ):
                report = io.StringIO()
                pstats.Stats(profile, stream=report).sort_stats("cumulative").print_stats(40)
                (self._profile_dir / f"{name}.txt").write_text(report.getvalue())

    def _close_epoch(self, now: float) -> None:
        """Split the epoch whose marks are held, now that the next one starts (or the fit ends)."""
        m = self._marks
        if not {"start", "first_end", "last_end"} <= m.keys():
            return
        val_start, val_end = m.get("val_start", m["last_end"]), m.get("val_end", m["last_end"])
        steps = int(m["steps"])
        self.epochs.append(
            {
                "steps": steps + 1,
                "first_s": m["first_end"] - m["start"],
                "steps_s": m["last_end"] - m["first_end"],
                "period_ms": (m["last_end"] - m["first_end"]) * 1000.0 / max(steps, 1),
                "to_val_s": val_start - m["last_end"],
                "val_s": val_end - val_start,
                "turnover_s": now - val_end,
                "checkpoint_s": self._checkpoint_s,
                "late_check_waits": m["late_waits_last"] - m["late_waits_first"],
                **self._device_timeline(),
                **self._gc.take(),
            }
        )
        self._marks = {}

    def _device_timeline(self) -> dict[str, float | None]:
        """``step_*`` (the steps after the epoch's first), ``first_gap_ms``, ``between_*`` (the
        other gaps) and ``host_wait_*``, read after the epoch's last synchronisation, so that no
        event is waited for inside it."""
        whole = [(start, end) for start, end in self._step_clocks if end is not None]
        steps = [end.ms_since(start) for start, end in whole[1:]]
        between = [
            start.ms_since(previous_end)
            for (_, previous_end), (start, _) in itertools.pairwise(whole)
        ]
        self._step_clocks = []
        return {
            **_describe("step", steps),
            "first_gap_ms": between[0] if between else None,
            **_describe("between", between[1:]),
            **_describe("host_wait", self._host_waits[1:]),
        }


def _late_check_waits(module: Any) -> float:
    """How many late checks of the loss guard have waited for their flags so far (0 when the
    module has no guard): each one is a step whose host waited for the device."""
    guard = getattr(module, "loss_guard", None)
    return float(getattr(guard, "waits", 0))


PARTS = ("first_s", "steps_s", "to_val_s", "turnover_s", "checkpoint_s", "val_s")


def summary(epochs: list[dict[str, float]]) -> dict[str, Any]:
    """Totals over the epochs after the first (start-up's recordings stay out), and per step."""
    tail = epochs[1:] or epochs
    steps = sum(int(e["steps"]) for e in tail)
    totals = {part: sum(e[part] for e in tail) for part in PARTS}
    train_s = sum(totals[p] for p in ("first_s", "steps_s", "to_val_s", "turnover_s"))
    timeline = {
        key: _median([e[key] for e in tail if e.get(key) is not None]) for key in TIMELINE_KEYS
    }
    return {
        "epochs": len(tail),
        "steps": steps,
        "train_s": train_s,
        "train_ms_per_step": train_s * 1000.0 / max(steps, 1),
        "steady_period_ms": _median([e["period_ms"] for e in tail]),
        "late_check_waits": _median([e["late_check_waits"] for e in tail]),
        "device_timeline_ms": timeline,
        "gc_per_epoch": {
            key: _median([e[key] for e in tail if e.get(key) is not None]) for key in GcPauses.KEYS
        },
        "per_step_ms": {part: totals[part] * 1000.0 / max(steps, 1) for part in PARTS},
        "totals_s": totals,
    }


def table(result: dict[str, Any]) -> str:
    """A markdown table of the summary's parts per step."""
    per_step = result["per_step_ms"]
    timeline = result["device_timeline_ms"]
    lines = [
        f"{result['epochs']} epochs after the first, {result['steps']} steps; train_s / steps "
        f"{result['train_ms_per_step']:.2f} ms, steady period (median epoch) "
        f"{result['steady_period_ms']:.2f} ms; late loss checks that waited for the device "
        f"in an epoch's steady steps (median over epochs) {result['late_check_waits']:.0f}",
    ]
    for name, label in (("step", "step"), ("between", "between steps"), ("host_wait", "host wait")):
        stats = [timeline[f"{name}{stat}_ms"] for stat in STATISTICS]
        if all(value is not None for value in stats):
            lines.append(
                f"{label} (median epoch): median {stats[0]:.2f}, mean {stats[1]:.2f}, "
                f"p90 {stats[2]:.2f}, max {stats[3]:.2f} ms"
            )
    if timeline["first_gap_ms"] is not None:
        lines.append(
            f"gap after the first step (the probe synchronises there; median epoch): "
            f"{timeline['first_gap_ms']:.2f} ms"
        )
    gc_stats = result["gc_per_epoch"]
    if all(gc_stats[key] is not None for key in GcPauses.KEYS):
        lines.append(
            f"garbage collections (median epoch): {gc_stats['gc_count']:.0f}, "
            f"{gc_stats['gc_full']:.0f} full, {gc_stats['gc_ms']:.1f} ms, "
            f"longest {gc_stats['gc_max_ms']:.1f} ms"
        )
    lines += [
        "",
        "| part | ms per training step | seconds |",
        "|---|---:|---:|",
    ]
    lines += [
        f"| {part} | {per_step[part]:.2f} | {result['totals_s'][part]:.3f} |" for part in PARTS
    ]
    return "\n".join(lines) + "\n"


def _skip_hook(*_: Any, **__: Any) -> None:
    """A hook that does nothing: what ``--no-freeze`` puts in place of the freeze."""


def main() -> None:
    from bench_side_by_side import lucid_fit_arguments, synthetic_set

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=("detect", "segment", "pose", "obb"), default="detect")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--val-images", type=int, default=128)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--native", action="store_true", help="the native fit, not the replayed")
    parser.add_argument(
        "--lucid-args", nargs=argparse.REMAINDER, default=[], help="more `lucid-yolo fit` flags"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also cProfile the first two steps and the turnovers (first_steps.txt, turnover.txt)",
    )
    parser.add_argument(
        "--no-freeze",
        action="store_true",
        help="turn the fit's SetUpObjectsFrozen off (the set-up's objects stay collectable)",
    )
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-probe-fit-gap"))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    data_yaml = synthetic_set(args.root, args.task, args.images, args.val_images, args.imgsz)
    args.out.mkdir(parents=True, exist_ok=True)
    gaps = args.out / "fit_gap_epochs.json"
    command = [
        sys.executable, "-m", "lucid_yolo.cli", "fit",
        *lucid_fit_arguments(
            args.task, data_yaml, args.out / "run", batch=args.batch, imgsz=args.imgsz,
            epochs=args.epochs, replay=not args.native, cpu=not torch.cuda.is_available(),
        ),
        "--trainer.callbacks+=probe_fit_gap.FitGaps",
        *args.lucid_args,
    ]  # fmt: skip
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TOOLS_DIR), env.get("PYTHONPATH")]))
    env[GAPS_ENV] = str(gaps)
    if args.profile:
        env[PROFILE_ENV] = str(args.out)
    if args.no_freeze:
        env[NO_FREEZE_ENV] = "1"
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    (args.out / "fit_gap_fit.log").write_text(done.stdout[-20000:] + done.stderr[-20000:])
    if done.returncode != 0:
        raise SystemExit(f"the fit failed ({done.returncode}): {done.stderr[-2000:]}")
    epochs = json.loads(gaps.read_text())
    result = {
        "task": args.task,
        "batch": args.batch,
        "replay": not args.native,
        "frozen": not args.no_freeze,
        **summary(epochs),
        "per_epoch": epochs,
    }
    (args.out / "fit_gap.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "fit_gap.md").write_text(table(result))
    print(table(result), end="")


if __name__ == "__main__":
    main()
