"""What a background checkpoint write costs a busy Python thread, per thread switch interval.

A fit writes its checkpoints on a writer thread (``AtomicCheckpointIO``, background during a
fit) while the training thread launches the next steps. ``torch.save`` pickles the checkpoint's
structure and its 1,782 tensors holding the GIL, and the training thread then waits up to
CPython's switch interval (``sys.setswitchinterval``, 0.005 s by default) each time it wants the
GIL back. This probe writes yolo26n's checkpoint payload (weights, an EMA copy and one momentum
buffer per parameter, as in a fit's ``best.ckpt``) with the fit's own ``atomic_save`` on a
thread, while the main thread runs a tight Python loop, and reports for each interval, in
alternating rounds:

* ``write_ms``: how long the write took;
* ``lost_ms`` and ``gaps``: the main loop's time in iterations over 1 ms (an iteration takes
  microseconds), and how many there were;
* ``longest_ms``: its longest iteration.

The loop is a worst case for the writer (it never waits); a fit's training thread often waits
(for a batch, for the device), so the probe shows the mechanism, and
``tools/probe_checkpoint_cost.py`` measures it in a fit (the steps that overlap a write against
the others). Only gaps over 1 ms count as lost: a fit's device queue absorbs shorter ones while
the host is ahead of it. ``tools/probe_loader_thread.py`` compares the same two intervals for
the loader's pin-memory thread.

Session 17, the 2-core dev machine otherwise idle, two rounds: at 0.005 s the write took 21-32 s
(the writer, handing the GIL over at each file write, waits a whole interval to get it back) and
the loop lost 144-145 ms in 27-29 gaps (longest 5.2-8.1 ms); at 0.0005 s the write took 2.0-2.1 s
and the loop lost 3-12 ms. With a third process on those two cores the writes took 0.5-0.6 s and
the loop lost 110-220 ms at either interval: the result depends on the machine's load. Run (any
machine, CPU only)::

    python3 tools/probe_writer_gil.py --intervals 0.005 0.0005 --rounds 2 --out $OUT/writer
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch import Tensor

from lucid_yolo.models import create_model
from lucid_yolo.train.callbacks import atomic_save


def payload(model: str) -> dict[str, Any]:
    """A checkpoint-shaped dict: the weights, an EMA copy, one momentum per parameter."""
    net = create_model(model, num_classes=5)
    weights = net.state_dict()
    momenta = {i: {"momentum_buffer": p.detach().clone()} for i, p in enumerate(net.parameters())}
    return {
        "state_dict": {k: v.clone() for k, v in weights.items()},
        "ema": {k: v.clone() for k, v in weights.items()},
        "optimizer_states": [{"state": momenta}],
    }


def tensors_in(checkpoint: dict[str, Any]) -> int:
    """How many tensors ``checkpoint`` holds, at any depth."""
    count = 0
    stack: list[Any] = [checkpoint]
    while stack:
        item = stack.pop()
        if isinstance(item, Tensor):
            count += 1
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


@contextmanager
def switch_interval(interval: float) -> Iterator[None]:
    """Run the body under the thread switch interval ``interval`` (process-wide), and put the
    previous one back after it, also when it raised."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def one_round(checkpoint: dict[str, Any], path: Path, interval: float) -> dict[str, float]:
    """Write ``checkpoint`` on a thread with ``interval`` set while the caller loops.

    Raises:
        Exception: what the write raised on its thread.
    """
    outcome: dict[str, Any] = {}

    def write() -> None:
        began = time.perf_counter()
        try:
            atomic_save(checkpoint, path)
        except Exception as error:  # re-raised on the caller's thread below
            outcome["error"] = error
        outcome["seconds"] = time.perf_counter() - began

    lost = longest = 0.0
    gaps = 0
    with switch_interval(interval):
        writer = threading.Thread(target=write)
        last = time.perf_counter()
        writer.start()
        while writer.is_alive():
            sum(range(200))
            now = time.perf_counter()
            gap, last = now - last, now
            longest = max(longest, gap)
            if gap > 0.001:
                lost += gap
                gaps += 1
        writer.join()
    if "error" in outcome:
        raise outcome["error"]
    return {
        "interval_s": interval,
        "write_ms": outcome["seconds"] * 1000.0,
        "lost_ms": lost * 1000.0,
        "gaps": gaps,
        "longest_ms": longest * 1000.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="yolo26n")
    parser.add_argument("--intervals", type=float, nargs="+", default=[0.005, 0.0005])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    checkpoint = payload(args.model)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "probe.ckpt"
        for _ in range(args.rounds):
            for interval in args.intervals:
                row = one_round(checkpoint, target, interval)
                rows.append(row)
                print(
                    f"switch interval {interval * 1000:.2f} ms: write {row['write_ms']:.0f} ms, "
                    f"the loop lost {row['lost_ms']:.0f} ms in {row['gaps']} gaps over 1 ms, "
                    f"longest {row['longest_ms']:.1f} ms",
                    flush=True,
                )
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"model": args.model, "tensors": tensors_in(checkpoint), "rounds": rows}
    (args.out / "writer_gil.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
