"""The loader's thread against the replayed step's host: which way of delivering batches keeps a
replayed step fastest.

Under cProfile a batch-4 replayed detect step on the H200 took about 2.8 times its GPU work, and
the process that launches it also runs the DataLoader's pin-memory thread, which receives each
batch's tensors from the workers (one file descriptor per tensor), pins them and queues them,
holding the interpreter lock while it does. Whether that thread slows the step was a reading of
the profile, not a measurement (docs/engineering/whole-fit-speed.md, "The loader's thread and
the replayed step": it does not, the step is nearly GPU-bound). This tool measures it: one
replayed detect fit per variant and batch size, each in its own process (validation off, the
data module's defaults otherwise, bf16, network, loss and update replayed), and over the second
half of the steps, without a profiler:

* ``period_ms``: wall time per step, the device synchronised at both ends of the window;
* ``between_ms``: host time per step from one step's end to the next one's start (the batch's
  fetch, copy, unpacking and the launches of the device pixels).

With ``--receive N`` it runs no fit: it times the main thread taking N training batches from the
loader alone, the workers ahead (``--gap`` seconds between batches), per variant; on a machine
without CUDA nothing is pinned, so the main thread itself receives each batch from the workers.

Variants (``--variants``): ``tensors`` (session 6's path: the batch as ten tensors, pinned in
the DataLoader's thread); ``switch-0.5ms`` (``sys.setswitchinterval``, 5 ms by default, so a
thread waiting for the lock gets it sooner); ``packed`` (one buffer per batch: one descriptor,
one pin, one copy); ``file-system`` (``torch.multiprocessing``'s ``file_system`` sharing
strategy: tensors shared by name, no descriptor passing); ``phase-timer`` (``tensors`` with the
``PhaseTimer`` the CLI adds to every fit); ``cli-callbacks`` (``tensors`` with every callback the
CLI's ``fit`` adds but the two checkpoints, which need validation metrics, and its CSV logger).
Rounds (``--rounds``) run the variants in alternating order (ABBA...), so a drift over the run
does not read as a difference between variants.

Run (GPU machine, from source; results in ``$OUT/loader_thread.json`` and ``.md``, or
``loader_receive.*`` with ``--receive``, written after each process so a run cut short keeps what
finished)::

    python3 tools/probe_loader_thread.py --batch 4 16 --steps 120

On a machine without CUDA the fits run on the CPU, a smoke test (no pinning there)::

    python3 tools/probe_loader_thread.py --batch 2 --steps 4 --images 8 --imgsz 64 --workers 1
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lucid_yolo.train.data.dataset_yaml import Task

TASK: Task = "detect"
MODEL = "yolo26n"
RESULT = "probe_loader_thread: "
"""Prefix of the line a child prints its result on."""


@dataclass(frozen=True)
class Variant:
    """How one fit delivers its batches.

    Attributes:
        switch_interval: ``sys.setswitchinterval`` seconds; ``None`` leaves Python's 5 ms.
        sharing_strategy: ``torch.multiprocessing.set_sharing_strategy``; ``None`` leaves the
            platform's default (``file_descriptor`` on Linux).
        pack_batches: ``YoloDataModule(pack_batches=...)``.
        phase_timer: add the CLI's ``PhaseTimer``.
        cli_callbacks: add every callback of the CLI's ``fit`` but the checkpoints, and its
            CSV logger.
    """

    switch_interval: float | None = None
    sharing_strategy: str | None = None
    pack_batches: bool = False
    phase_timer: bool = False
    cli_callbacks: bool = False


VARIANTS = {
    "tensors": Variant(),
    "switch-0.5ms": Variant(switch_interval=0.0005),
    "packed": Variant(pack_batches=True),
    "file-system": Variant(sharing_strategy="file_system"),
    "phase-timer": Variant(phase_timer=True),
    "cli-callbacks": Variant(cli_callbacks=True),
}


def _extra_callbacks(variant: Variant, log_dir: Path) -> tuple[list[Any], Any]:
    """The variant's callbacks beside the window, and its logger (``False``: none)."""
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger

    from lucid_yolo.cli.lightning_cli import trainer_defaults
    from lucid_yolo.train.callbacks import PhaseTimer

    if variant.cli_callbacks:
        callbacks = trainer_defaults("fit")["callbacks"]
        kept = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
        return kept, CSVLogger(save_dir=log_dir)
    return ([PhaseTimer()] if variant.phase_timer else []), False


def _fit(args: argparse.Namespace) -> dict[str, Any]:
    """One fit with ``args.child``'s variant, in this process; its row."""
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import Callback

    from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule

    variant = VARIANTS[args.child]
    if variant.switch_interval is not None:
        sys.setswitchinterval(variant.switch_interval)
    if variant.sharing_strategy is not None:
        torch.multiprocessing.set_sharing_strategy(variant.sharing_strategy)  # type: ignore[no-untyped-call]
    cuda = torch.cuda.is_available()

    class Window(Callback):
        """Times the steps after ``start`` up to the fit's last one."""

        def __init__(self, start: int) -> None:
            self.start = start
            self.steps = 0
            self.seconds = 0.0
            self.between = 0.0
            self._began = 0.0
            self._ended: float | None = None

        def on_train_batch_start(self, trainer: pl.Trainer, *_: Any) -> None:
            if self._ended is not None:
                self.between += time.perf_counter() - self._ended

        def on_train_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
            step = trainer.global_step
            if step == self.start:
                if cuda:
                    torch.cuda.synchronize()
                self._began = time.perf_counter()
            elif step > self.start:
                self.steps += 1
                if step == trainer.max_steps:
                    if cuda:
                        torch.cuda.synchronize()
                    self.seconds = time.perf_counter() - self._began
                    self._ended = None
                    return
            else:
                return
            self._ended = time.perf_counter()

    pl.seed_everything(0, verbose=False)
    data = YoloDataModule(
        args.root / TASK / "data.yaml",
        task=TASK,
        imgsz=args.imgsz,
        batch_size=args.batch[0],
        workers=args.workers,
        pack_batches=variant.pack_batches,
    )
    module = YoloModule(
        MODEL,
        num_classes=data.num_classes,
        replay=ReplayConfig(network=True, loss=True, update=True),
    )
    window = Window(args.steps // 2)
    callbacks, logger = _extra_callbacks(variant, args.out / "logs" / args.child)
    # bench_trainer.step_trainer's trainer, with the variant's callbacks and logger
    trainer = pl.Trainer(
        accelerator="auto",
        devices=1,
        precision="bf16-mixed" if cuda else "32-true",
        max_steps=args.steps,
        limit_val_batches=0,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[window, *callbacks],
    )
    trainer.fit(module, data)
    steps = max(window.steps, 1)
    return {
        **asdict(variant),
        "variant": args.child,
        "batch": args.batch[0],
        "workers": data.workers,
        "steps_timed": window.steps,
        "period_ms": round(window.seconds * 1000.0 / steps, 3),
        "between_ms": round(window.between * 1000.0 / steps, 3),
        "switch_interval_s": sys.getswitchinterval(),
        "sharing_strategy": torch.multiprocessing.get_sharing_strategy(),  # type: ignore[no-untyped-call]
        "replays": int(module.replay_telemetry.replays),
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "callbacks": sorted({type(c).__name__ for c in trainer.callbacks}),  # type: ignore[attr-defined]
        "logger": type(trainer.logger).__name__ if trainer.logger else None,
    }


def _receive(args: argparse.Namespace) -> dict[str, Any]:
    """The main thread's time to take one training batch from the loader, with the workers ahead
    (``args.gap`` seconds between batches let them refill the queue): the fetch and a packed
    batch's unpacking; no model, no trainer.

    Wall time (``receive_us_*``) depends on what else the machine runs; the main thread's CPU
    time (``main_cpu_us_median``) and the main process's, all its threads (the pin-memory
    thread, the queues' feeder threads) per batch (``process_cpu_us_per_batch``) much less."""
    import statistics

    import torch

    from lucid_yolo.train import YoloDataModule
    from lucid_yolo.train.data.augment import AugmentConfig
    from lucid_yolo.train.data.packed_batch import PackedBatch

    variant = VARIANTS[args.child]
    if variant.switch_interval is not None:
        sys.setswitchinterval(variant.switch_interval)
    if variant.sharing_strategy is not None:
        torch.multiprocessing.set_sharing_strategy(variant.sharing_strategy)  # type: ignore[no-untyped-call]
    data = YoloDataModule(
        args.root / TASK / "data.yaml",
        task=TASK,
        imgsz=args.imgsz,
        batch_size=args.batch[0],
        workers=args.workers,
        augment=AugmentConfig(pixels_on_device=True),
        pack_batches=variant.pack_batches,
    )
    data.setup("fit")
    batches = _epochs(data.train_dataloader())
    seconds, thread_cpu, process_began = [], [], 0.0
    for index in range(args.receive + 2):  # the first two wait for the workers to start
        if index == 2:
            process_began = time.process_time()
        time.sleep(args.gap)
        began, cpu_began = time.perf_counter(), time.thread_time()
        batch = next(batches)
        if isinstance(batch, PackedBatch):
            batch = batch.unpack()
        if index >= 2:
            seconds.append(time.perf_counter() - began)
            thread_cpu.append(time.thread_time() - cpu_began)
    process_cpu = time.process_time() - process_began
    del batches
    return {
        **asdict(variant),
        "variant": args.child,
        "batch": args.batch[0],
        "workers": data.workers,
        "batches_timed": len(seconds),
        "receive_us_median": round(statistics.median(seconds) * 1e6, 1),
        "receive_us_p90": round(statistics.quantiles(seconds, n=10)[-1] * 1e6, 1),
        "main_cpu_us_median": round(statistics.median(thread_cpu) * 1e6, 1),
        "process_cpu_us_per_batch": round(process_cpu / len(seconds) * 1e6, 1),
        "tensors": sum(isinstance(v, torch.Tensor) for v in batch.values()),
        "pinned": bool(batch["images"].is_pinned()) if torch.cuda.is_available() else False,
    }


def _epochs(loader: Any) -> Iterator[Any]:
    """The training loader's batches, one epoch after another, as a Trainer asks for them."""
    for epoch in itertools.count():
        loader.sampler.set_epoch(epoch)
        yield from loader


def _child_command(args: argparse.Namespace, variant: str, batch: int) -> list[str]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", variant]
    command += ["--batch", str(batch), "--steps", str(args.steps), "--imgsz", str(args.imgsz)]
    command += ["--root", str(args.root), "--receive", str(args.receive), "--gap", str(args.gap)]
    command += ["--out", str(args.out)]
    if args.workers is not None:
        command += ["--workers", str(args.workers)]
    return command


def _run_child(args: argparse.Namespace, variant: str, batch: int) -> dict[str, Any]:
    """One fit in a fresh process; its row, or why there is none."""
    began = time.perf_counter()
    try:
        done = subprocess.run(
            _child_command(args, variant, batch),
            capture_output=True,
            text=True,
            timeout=args.fit_timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"variant": variant, "batch": batch, "error": f"timed out ({args.fit_timeout} s)"}
    seconds = round(time.perf_counter() - began, 1)
    rows = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not rows:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        return {"variant": variant, "batch": batch, "error": " | ".join(tail), "fit_s": seconds}
    row: dict[str, Any] = json.loads(rows[-1].removeprefix(RESULT))
    row["fit_s"] = seconds
    return row


def round_order(variants: list[str], round_: int) -> list[str]:
    """The variants in round ``round_``'s order: as given, then reversed, and so on (ABBA)."""
    return list(variants) if round_ % 2 == 0 else list(variants[::-1])


def table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of the rows, each period also against the same batch's ``tensors``."""
    base = {
        r["batch"]: r["period_ms"] for r in rows if r["variant"] == "tensors" and "period_ms" in r
    }
    lines = [
        "| batch | variant | period, ms | vs tensors | between steps, ms | fit, s |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['batch']} | {r['variant']} | failed: {r['error']} | | | |")
            continue
        ratio = f"{r['period_ms'] / base[r['batch']]:.3f}" if base.get(r["batch"]) else "-"
        lines.append(
            f"| {r['batch']} | {r['variant']} | {r['period_ms']:.2f} | {ratio} | "
            f"{r['between_ms']:.2f} | {r['fit_s']} |"
        )
    return "\n".join(lines) + "\n"


def receive_table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of ``--receive`` rows."""
    lines = [
        "| batch | variant | tensors | wall median, us | wall p90, us | main thread CPU, us |"
        " process CPU per batch, us |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['batch']} | {r['variant']} | failed: {r['error']} | | | | |")
            continue
        lines.append(
            f"| {r['batch']} | {r['variant']} | {r['tensors']} | {r['receive_us_median']:.0f} | "
            f"{r['receive_us_p90']:.0f} | {r['main_cpu_us_median']:.0f} | "
            f"{r['process_cpu_us_per_batch']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds of variants")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--workers", type=int, default=None, help="default: the data module's")
    parser.add_argument("--fit-timeout", type=float, default=120.0, help="seconds per fit")
    parser.add_argument("--root", type=Path, default=Path("/tmp/lucid-probe-loader-thread"))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument(
        "--receive",
        type=int,
        default=0,
        help="instead of fits: time N batches taken from the loader alone (no model)",
    )
    parser.add_argument("--gap", type=float, default=0.05, help="--receive: seconds between")
    parser.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        row = _receive(args) if args.receive else _fit(args)
        print(RESULT + json.dumps(row), flush=True)
        return
    from lucid_yolo.train.data.synthetic import generate_synthetic

    if not (args.root / TASK / "data.yaml").is_file():
        generate_synthetic(
            args.root / TASK, task=TASK, num_train=args.images, num_val=8, imgsz=args.imgsz
        )
    args.out.mkdir(parents=True, exist_ok=True)
    name, write = ("loader_receive", receive_table) if args.receive else ("loader_thread", table)
    rows: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        order = round_order(args.variants, round_)
        for batch in args.batch:
            for variant in order:
                rows.append(_run_child(args, variant, batch))
                print(json.dumps(rows[-1]), flush=True)
                (args.out / f"{name}.json").write_text(json.dumps(rows, indent=1) + "\n")
                (args.out / f"{name}.md").write_text(write(rows))
    print(write(rows), end="")


if __name__ == "__main__":
    main()
