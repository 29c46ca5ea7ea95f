"""Whether a backward's memory is still held when ``torch.autograd.grad`` has returned.

Why (issue 11, session 16): in the H200 GPU suite under pytest-xdist (6 processes sharing 16
cores), a recorder's warm-up in the graph pool raised ``PoolLeakError`` now and then for a few
small blocks (512 bytes in a detect loss warm-up, 266 KiB in a segment one) in tests that pass
alone. The warm-up drops the gradients that ``autograd.grad`` returns at once, and the pool then
counts its live blocks. A backward of CUDA tensors runs on autograd's worker thread for the
device, which wakes the caller before it drops its own reference to the finished task (and to
what the task hands back). This probe asks whether that window is seen from Python, and whether
``lucid_yolo.replay.leak_evidence.drain_autograd_worker`` closes it.

Each round runs a small convolution's forward and ``autograd.grad`` to its input and weight on
a side stream, drops the gradients, and asks whether their storages are still alive (a weak
reference to each, which sees C++ references too) right away (``at_return``), after
``gc.collect()`` (``after_gc``) and after ``drain_autograd_worker`` (``after_drain``).
``--busy N`` runs N processes that spin on the CPU meanwhile, as the suite's other workers do.
Modes alternate: a quiet block, then a busy one, ``--blocks`` times.

Run on the GPU machine (repository root)::

    python3 tools/probe_autograd_release.py --rounds 500 --busy 8 --out $OUT/autograd_release

Prints one line per block and rewrites ``autograd_release.json`` in ``--out`` after each, so a
run cut short keeps its finished blocks. With as many spinning processes as cores (16 on the
H200 machine), two quiet blocks and one busy block of 500 rounds finished within 150 s and the
second busy block did not.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from lucid_yolo.replay.leak_evidence import drain_autograd_worker

STAGES = ("at_return", "after_gc", "after_drain")
"""When the memory is read after each round's backward, in order."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=500, help="backwards per block")
    parser.add_argument("--blocks", type=int, default=2, help="quiet/busy block pairs")
    parser.add_argument("--busy", type=int, default=8, help="CPU-spinning processes when busy")
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args(argv)


def _spin(stop: Any) -> None:
    while not stop.is_set():
        sum(range(10_000))


def _alive(storages: list[StorageWeakRef]) -> bool:
    return any(not s.expired() for s in storages)  # type: ignore[no-untyped-call]


def run_block(rounds: int, device: torch.device) -> dict[str, int]:
    """Rounds whose gradients' memory was still held at each stage."""
    conv = torch.nn.Conv2d(16, 16, 3, padding=1, device=device)
    side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
    held = dict.fromkeys(STAGES, 0)
    for _ in range(rounds):
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            images = torch.randn(4, 16, 32, 32, device=device, requires_grad=True)
            grads = torch.autograd.grad(conv(images).square().sum(), (images, conv.weight))
            storages = [
                StorageWeakRef(grad.untyped_storage())  # type: ignore[no-untyped-call]
                for grad in grads
            ]
            del images, grads
        torch.cuda.current_stream(device).wait_stream(side)
        still = {"at_return": _alive(storages)}
        gc.collect()
        still["after_gc"] = _alive(storages)
        drain_autograd_worker(device)
        still["after_drain"] = _alive(storages)
        for stage in STAGES:
            held[stage] += still[stage]
    return held


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_autograd_release: needs a CUDA device (autograd's worker thread is CUDA's)")
        return 2
    device = torch.device("cuda", torch.cuda.current_device())
    args.out.mkdir(parents=True, exist_ok=True)
    run_block(50, device)
    blocks: list[dict[str, Any]] = []
    for _ in range(args.blocks):
        for mode in ("quiet", "busy"):
            stop = multiprocessing.Event()
            spinners = [
                multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
                for _ in range(args.busy if mode == "busy" else 0)
            ]
            for spinner in spinners:
                spinner.start()
            began = time.perf_counter()
            held = run_block(args.rounds, device)
            stop.set()
            for spinner in spinners:
                spinner.join()
            blocks.append(
                {
                    "mode": mode,
                    "rounds": args.rounds,
                    "seconds": round(time.perf_counter() - began, 2),
                    **held,
                }
            )
            report = {"torch": torch.__version__, "busy": args.busy, "blocks": blocks}
            (args.out / "autograd_release.json").write_text(json.dumps(report, indent=1) + "\n")
            print(
                f"{mode}: {args.rounds} rounds, gradients still alive at return "
                f"{held['at_return']}, after gc {held['after_gc']}, after the drain "
                f"{held['after_drain']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
