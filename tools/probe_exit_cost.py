"""How long a `lucid-yolo fit` process takes to end after its fit, with and without the fast exit.

Why (issue 11): the side-by-side benchmark counts a fit's process from its start to its end, and
2.0-2.5 s of the replayed H200 fits of session 10 came after the fit's last hook (``on_fit_end``).
On the dev machine most of such a gap is CPython's teardown of the objects the process built,
which ``lucid_yolo.cli.fast_exit`` skips. This tool runs the same short CLI fit twice per round,
each in a fresh process, alternating: ``fast`` (``python -m lucid_yolo.cli``, the process entry
with the fast exit) and ``teardown`` (``main()`` called and ``sys.exit`` on its code, the exit as
before); each child prints the wall clock at ``on_fit_end`` (a callback in this file), and the
parent reads the clock when the child has ended. The gap is the difference. The fit is the
benchmark's (``bench_side_by_side.lucid_fit_arguments``: the packaged ``detect-n`` config, every
replay region on a GPU) on its synthetic set.

Run (repository root; the synthetic set is written under ``--root``)::

    uv run python tools/probe_exit_cost.py --rounds 2 --accelerator cpu

On the GPU machine, ``--accelerator gpu`` replays as the benchmark does, so the gap includes the
graphs' teardown. Writes ``exit_cost.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

FIT_END = "probe_exit_cost: fit ended at "
"""Prefix of the line a child prints in ``on_fit_end``: the wall clock, seconds."""
TEARDOWN_ENTRY = "import sys; from lucid_yolo.cli.main import main; sys.exit(main())"
"""The exit before the fast exit: ``main()``'s code handed to ``sys.exit``."""


class FitEnd(pl.Callback):
    """Prints the wall clock when the fit ends (the child's ``--trainer.callbacks``)."""

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        print(f"{FIT_END}{time.time()!r}", flush=True)


def child_command(mode: str, fit_args: list[str]) -> list[str]:
    """The child's command line for ``mode`` (``fast`` or ``teardown``)."""
    if mode == "fast":
        return [sys.executable, "-m", "lucid_yolo.cli", *fit_args]
    return [sys.executable, "-c", TEARDOWN_ENTRY, *fit_args]


def exit_gap(done: subprocess.CompletedProcess[str], ended: float) -> float:
    """Seconds from the child's ``on_fit_end`` to the parent seeing it end."""
    lines = [line for line in done.stdout.splitlines() if line.startswith(FIT_END)]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"the fit failed (exit {done.returncode}): {' | '.join(tail)}")
    return ended - float(lines[-1].removeprefix(FIT_END))


def fit_arguments(data: Path, args: argparse.Namespace) -> list[str]:
    """The benchmark's fit (``bench_side_by_side.lucid_fit_arguments``: replayed on a GPU),
    with :class:`FitEnd`."""
    from bench_side_by_side import lucid_fit_arguments

    gpu = args.accelerator == "gpu"
    fit = lucid_fit_arguments(
        "detect", data, args.root / "runs", batch=args.batch, imgsz=args.imgsz,
        epochs=args.epochs, replay=gpu, cpu=not gpu,
    )  # fmt: skip
    return ["fit", *fit, "--trainer.callbacks+=probe_exit_cost.FitEnd"]


def main() -> None:
    from bench_side_by_side import synthetic_set

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--imgsz", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-probe-exit-cost"))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    data = synthetic_set(args.root, "detect", args.images, args.images // 2, args.imgsz)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    gaps: dict[str, list[float]] = {"fast": [], "teardown": []}
    for round_ in range(args.rounds):
        modes = ["fast", "teardown"] if round_ % 2 == 0 else ["teardown", "fast"]
        for mode in modes:
            command = child_command(mode, fit_arguments(data, args))
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            gaps[mode].append(exit_gap(done, time.time()))
            print(f"round {round_} {mode}: {gaps[mode][-1]:.3f} s after on_fit_end", flush=True)
    result: dict[str, Any] = {
        "accelerator": args.accelerator,
        "gaps_s": gaps,
        "median_s": {mode: statistics.median(values) for mode, values in gaps.items()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "exit_cost.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["median_s"]))


if __name__ == "__main__":
    main()
