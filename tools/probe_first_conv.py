"""Which convolutions of YOLO26 pay a first-call cost, and on which layout.

Why (issue 11, docs/engineering/whole-fit-speed.md, "The first step's cost by layout: the
probe"): on the H200 the first training step of a replayed detect fit took 6.16 s with
channels-last weights and images (the CUDA default) against 1.17 s in NCHW, one run each
(``tools/profile_startup.py --replay --batch 16 --steps 4``); later steps take 0.03-0.04 s. That
cost is paid once per process, so it decides whether channels-last pays on a short fit. A
candidate cause, not verified: cuDNN 9.10+ finalises some execution plans by runtime compilation,
which cudnn-frontend issue #1066 reports at about 1.5 s per new depthwise convolution, and YOLO26
has depthwise convolutions (``models/conv.py``'s ``depthwise``, ``models/attention.py``).

What it measures: the packaged network's every ``nn.Conv2d`` and ``nn.ConvTranspose2d`` is
recorded (``tools/network_convs.py``) by a forward hook on a CPU training-mode forward at
``--imgsz``, deduplicated by its
configuration (kind, channels, kernel, stride, padding, dilation, groups, bias, input ``H×W``,
whether its input needs a gradient, its dtype) and counted. Then, for each variant, in a fresh
process (the cost is per process) on ``--device`` in bf16 autocast, every distinct configuration
in the network's forward order gets a standalone convolution in the variant's layout at each
``--batch``: its first forward and backward are timed apart with the device synchronised around
each, then a second call the same way; first minus second is the configuration's first-call
cost. Then ``--steady`` more calls, timed by CUDA events back to back (on a CPU by the wall
clock), give the median milliseconds of a settled call; counted by the network's uses, they sum
to the convolutions' share of a step (with the host's launch gaps where a kernel is shorter than
its launch). Before the configurations each process times CUDA's start and one small dense
convolution (cuDNN's own start, torch's lazy imports on the first backward), reported apart.

Variants: ``channels_last`` and ``contiguous`` (``--layouts``); with ``--depthwise-without-cudnn``
also ``<layout>+dw-native``, the same with ``torch.backends.cudnn.enabled`` off around the
depthwise configurations only, so PyTorch's own depthwise kernel runs them: does that remove the
cost, and what does it cost per step? ``--rounds 2`` runs every variant twice, in alternating
order, which shows whether a second process of a variant is cheaper (a cache on disk).

The check on the sum (``--network``, instead of the configurations): per layout, a fresh process
times the whole network's first and second forward+backward (bf16 autocast, a sum of the raw
outputs as the loss) after the same small convolution; its first-call cost is what the network
adds to a fit's first step, to hold against the configurations' total.

Limits: a cost that several configurations share (one compiled kernel used by two shapes) lands
on the first of them in the forward order; the fit's first step runs the backward in reverse
order, so its attribution can differ while the total should not. Only convolutions are probed
(not BatchNorm, activations, the loss or the update).

Run (GPU machine, from source, the machine to itself; ``$OUT/first_conv.json`` and ``.md``,
rewritten after each process; ``network_first_call.*`` with ``--network``)::

    export PYTHONPATH=$(ls -d packages/*/src | paste -sd:)
    python3 tools/probe_first_conv.py --batch 16 4 --depthwise-without-cudnn

    python3 tools/probe_first_conv.py --batch 16 --network --out $OUT/network

Does a first call on another thread spare the main thread's (``--warm-in-thread``: a copy of
the network runs once on a thread before the timed calls)::

    python3 tools/probe_first_conv.py --batch 16 --network --layouts channels_last \\
        --warm-in-thread --out $OUT/thread

CPU smoke run (timings meaningless)::

    python3 tools/probe_first_conv.py --device cpu --imgsz 64 --batch 1 --steady 2
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from depthwise_nchw import VARIANT as DW_NCHW
from depthwise_nchw import nchw_depthwise
from lucid_yolo.models import create_model
from network_convs import KINDS, ConvConfig, network_convs

LAYOUTS = {
    "channels_last": torch.channels_last,
    "contiguous": torch.contiguous_format,
    DW_NCHW: torch.channels_last,
}
DEPTHWISE_NATIVE = "+dw-native"
"""Suffix of a variant whose depthwise convolutions run with cuDNN disabled."""
RESULT = "probe_first_conv: "
"""Prefix of the line a child prints its result on."""


# ---------------------------------------------------------------- one process per variant

CUDNN_START = ConvConfig(
    transposed=False,
    in_channels=8,
    out_channels=8,
    kernel=(1, 1),
    stride=(1, 1),
    padding=(0, 0),
    output_padding=(0, 0),
    dilation=(1, 1),
    groups=1,
    bias=False,
    height=8,
    width=8,
    input_requires_grad=True,
    input_dtype="bfloat16",
)
"""A small dense convolution each process calls first, timed apart from the network's."""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def _cudnn_enabled(enabled: bool) -> Iterator[None]:
    """``torch.backends.cudnn.enabled`` for the block alone; ``cudnn.flags`` would also reset
    the benchmark, determinism and TF32 flags to its own defaults."""
    before = torch.backends.cudnn.enabled
    torch.backends.cudnn.enabled = enabled
    try:
        yield
    finally:
        torch.backends.cudnn.enabled = before


def _forward(conv: nn.Module, x: Tensor) -> Tensor:
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        out: Tensor = conv(x)
    return out


def _timed_call(conv: nn.Module, x: Tensor) -> tuple[float, float, Tensor]:
    """Seconds of one forward and of its backward, each with the device synchronised around it,
    and the output gradient used (ones in the output's layout and dtype, as BatchNorm's backward
    would hand the convolution)."""
    _sync(x.device)
    began = time.perf_counter()
    out = _forward(conv, x)
    _sync(x.device)
    forward_s = time.perf_counter() - began
    grad = torch.ones_like(out)
    _sync(x.device)
    began = time.perf_counter()
    torch.autograd.backward(out, grad)
    _sync(x.device)
    backward_s = time.perf_counter() - began
    conv.zero_grad(set_to_none=True)
    x.grad = None
    return forward_s, backward_s, grad


def _timing_event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


def _steady_ms(conv: nn.Module, x: Tensor, grad: Tensor, calls: int) -> float:
    """Median milliseconds of one forward+backward over ``calls`` calls launched back to back."""
    if x.device.type == "cuda":
        marks: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        for _ in range(calls):
            start, end = _timing_event(), _timing_event()
            start.record()
            torch.autograd.backward(_forward(conv, x), grad)
            end.record()
            marks.append((start, end))
            conv.zero_grad(set_to_none=True)
            x.grad = None
        _sync(x.device)
        device_ms: list[float] = [start.elapsed_time(end) for start, end in marks]
        return statistics.median(device_ms)
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        torch.autograd.backward(_forward(conv, x), grad)
        times.append((time.perf_counter() - began) * 1e3)
        conv.zero_grad(set_to_none=True)
        x.grad = None
    return statistics.median(times)


def probe_config(
    config: ConvConfig, batch: int, layout: torch.memory_format, device: torch.device, steady: int
) -> dict[str, Any]:
    """The first, second and settled calls of a standalone ``config`` at ``batch``."""
    conv = config.standalone().to(device).to(memory_format=layout)
    shape = (batch, config.in_channels, config.height, config.width)
    x = torch.rand(shape, device=device, dtype=getattr(torch, config.input_dtype))
    x = x.to(memory_format=layout).requires_grad_(config.input_requires_grad)
    _sync(device)
    first_forward, first_backward, grad = _timed_call(conv, x)
    second_forward, second_backward, _ = _timed_call(conv, x)
    return {
        "first_forward_s": first_forward,
        "first_backward_s": first_backward,
        "second_forward_s": second_forward,
        "second_backward_s": second_backward,
        "steady_ms": _steady_ms(conv, x, grad, steady),
        "output_channels_last": grad.is_contiguous(memory_format=torch.channels_last),
        "cudnn": torch.backends.cudnn.enabled,
    }


def _cudnn_version() -> int | None:
    version: int | None = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
    return version


def _process_start(layout: torch.memory_format, device: torch.device) -> dict[str, Any]:
    """Where this process runs, and what its CUDA start and its first convolution took: what
    the process's first convolution pays (cuDNN's library and handle, torch's lazy imports on
    the first backward) is no configuration's cost."""
    began = time.perf_counter()
    torch.zeros(1, device=device)
    _sync(device)
    device_start_s = time.perf_counter() - began
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": _cudnn_version(),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "device_start_s": device_start_s,
        "first_conv": probe_config(CUDNN_START, 1, layout, device, 1),
    }


def run_variant(
    variant: str, configs: list[ConvConfig], batch: int, device: torch.device, steady: int
) -> dict[str, Any]:
    """Every configuration of ``configs`` in this (fresh) process: the child's whole work."""
    layout = LAYOUTS[variant.removesuffix(DEPTHWISE_NATIVE)]
    native_depthwise = variant.endswith(DEPTHWISE_NATIVE)
    start = _process_start(layout, device)
    rows = []
    for config in configs:
        with _cudnn_enabled(not (native_depthwise and config.kind == "depthwise")):
            rows.append(probe_config(config, batch, layout, device, steady))
    return {"variant": variant, "batch": batch, **start, "rows": rows}


def _network_loss(model: nn.Module, images: Tensor) -> Tensor:
    with torch.autocast(images.device.type, dtype=torch.bfloat16):
        outputs = model.train()(images)
    return torch.stack([out.float().sum() for out in outputs.values()]).sum()


def _warm_in_thread(model: nn.Module, images: Tensor) -> float:
    """Seconds of a forward+backward of a copy of ``model`` on another thread, joined.

    Whether that thread's first call spares the main thread's is the question: PyTorch keeps
    cuDNN's execution plans per thread, so only a cost cuDNN itself keeps per process (the
    kernels it compiles at run time) would be spared.
    """
    twin = copy.deepcopy(model)
    failures: list[BaseException] = []

    def forward_backward() -> None:
        try:
            torch.autograd.backward(_network_loss(twin, images))
            _sync(images.device)
        except BaseException as error:
            failures.append(error)

    began = time.perf_counter()
    thread = threading.Thread(target=forward_backward)
    thread.start()
    thread.join()
    if failures:
        raise failures[0]
    return time.perf_counter() - began


def run_network(
    layout_name: str,
    name: str,
    num_classes: int,
    imgsz: int,
    batch: int,
    device: torch.device,
    warm_in_thread: bool = False,
) -> dict[str, Any]:
    """The whole network's first and second forward+backward in this (fresh) process.

    The check on the sum over configurations: the same small convolution first, then the
    packaged network in ``layout_name`` (weights and images) in bf16 autocast, a sum of its raw
    outputs as the loss. First minus second is what a fit's first step pays for the network.
    With ``warm_in_thread`` a copy of the network runs once on another thread before.
    """
    layout = LAYOUTS[layout_name]
    start = _process_start(layout, device)
    model = create_model(name, num_classes=num_classes).to(device).to(memory_format=layout)
    if layout_name == DW_NCHW:
        nchw_depthwise(model)
    images = torch.rand(batch, 3, imgsz, imgsz, device=device).to(memory_format=layout)
    network: dict[str, float] = {}
    if warm_in_thread:
        network["thread_warm_s"] = _warm_in_thread(model, images)
    network.update(first_and_second_calls(model, images))
    return {"variant": layout_name, "batch": batch, **start, "network": network}


def first_and_second_calls(model: nn.Module, images: Tensor) -> dict[str, float]:
    """Seconds of the network's first and second forward and backward, the device synchronised
    around each: ``first_forward_s``, ``first_backward_s``, ``second_forward_s``,
    ``second_backward_s``."""
    seconds: dict[str, float] = {}
    for call in ("first", "second"):
        _sync(images.device)
        began = time.perf_counter()
        loss = _network_loss(model, images)
        _sync(images.device)
        seconds[f"{call}_forward_s"] = time.perf_counter() - began
        began = time.perf_counter()
        torch.autograd.backward(loss)
        _sync(images.device)
        seconds[f"{call}_backward_s"] = time.perf_counter() - began
        model.zero_grad(set_to_none=True)
    return seconds


# ---------------------------------------------------------------- the parent: processes and report


def variant_names(layouts: list[str], depthwise_without_cudnn: bool) -> list[str]:
    """The variants to run, each layout alone and then, if asked, with native depthwise."""
    names = list(layouts)
    if depthwise_without_cudnn:
        names += [layout + DEPTHWISE_NATIVE for layout in layouts]
    return names


def round_order(variants: list[str], round_: int) -> list[str]:
    """The variants in round ``round_``'s order: as given, then reversed, and so on (ABBA)."""
    return list(variants) if round_ % 2 == 0 else list(variants[::-1])


def first_call_s(row: dict[str, Any]) -> tuple[float, float]:
    """A configuration's first-call cost, forward and backward: first call minus second."""
    return (
        row["first_forward_s"] - row["second_forward_s"],
        row["first_backward_s"] - row["second_backward_s"],
    )


def run_summary(run: dict[str, Any], convs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per kind and over all: first-call seconds (each distinct configuration once, as a
    process pays it) and settled milliseconds per network forward+backward (each configuration
    times its uses)."""
    first = dict.fromkeys(("all", *KINDS), 0.0)
    steady = dict.fromkeys(("all", *KINDS), 0.0)
    for conv, row in zip(convs, run["rows"], strict=True):
        cost = sum(first_call_s(row))
        first[conv["kind"]] += cost
        first["all"] += cost
        per_step = row["steady_ms"] * conv["count"]
        steady[conv["kind"]] += per_step
        steady["all"] += per_step
    return {"first_call_s": first, "steady_ms_per_step": steady}


def _kinds(convs: list[dict[str, Any]]) -> list[str]:
    return [kind for kind in KINDS if any(conv["kind"] == kind for conv in convs)]


def summary_table(runs: list[dict[str, Any]], convs: list[dict[str, Any]]) -> str:
    """One row per process: its first-call and settled totals by kind."""
    kinds = ["all", *_kinds(convs)]
    lines = [
        "| batch | variant | round | "
        + " | ".join(f"first-call s, {k}" for k in kinds)
        + " | "
        + " | ".join(f"settled ms/step, {k}" for k in kinds)
        + " | process's first conv s | process s |",
        "|---:|---|---:|" + "---:|" * (2 * len(kinds) + 2),
    ]
    for run in runs:
        head = f"| {run['batch']} | {run['variant']} | {run['round']} |"
        if "error" in run:
            lines.append(f"{head} failed: {run['error']} |" + " |" * (2 * len(kinds) + 1))
            continue
        totals = run_summary(run, convs)
        first = " | ".join(f"{totals['first_call_s'][k]:.3f}" for k in kinds)
        steady = " | ".join(f"{totals['steady_ms_per_step'][k]:.2f}" for k in kinds)
        start = sum(first_call_s(run["first_conv"]))
        lines.append(f"{head} {first} | {steady} | {start:.3f} | {run['process_s']:.1f} |")
    return "\n".join(lines) + "\n"


def config_table(runs: list[dict[str, Any]], convs: list[dict[str, Any]], batch: int) -> str:
    """One row per configuration, one column pair per variant of round 0 at ``batch``."""
    done = [r for r in runs if r["batch"] == batch and r["round"] == 0 and "error" not in r]
    lines = [
        "| # | convolution | kind | uses | "
        + " | ".join(f"{r['variant']}: first-call s (fwd / bwd) | settled ms" for r in done)
        + " |",
        "|---:|---|---|---:|" + "---:|---:|" * len(done),
    ]
    for index, conv in enumerate(convs):
        cells = []
        for run in done:
            row = run["rows"][index]
            forward, backward = first_call_s(row)
            native = "" if row["cudnn"] else " (no cuDNN)"
            cells.append(
                f"{forward + backward:.3f} ({forward:.3f} / {backward:.3f}){native} | "
                f"{row['steady_ms']:.3f}"
            )
        lines.append(
            f"| {index} | {conv['label']} | {conv['kind']} | {conv['count']} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines) + "\n"


def network_table(runs: list[dict[str, Any]]) -> str:
    """One row per ``--network`` process: the whole network's first and second calls."""
    lines = [
        "| batch | layout | round | first fwd s | first bwd s | second fwd s | second bwd s |"
        " first-call s | thread warm-up s | process's first conv s | process s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        head = f"| {run['batch']} | {run['variant']} | {run['round']} |"
        if "error" in run:
            lines.append(f"{head} failed: {run['error']} |" + " |" * 7)
            continue
        network = run["network"]
        calls = " | ".join(
            f"{network[f'{call}_{half}_s']:.3f}"
            for call in ("first", "second")
            for half in ("forward", "backward")
        )
        cost = sum(first_call_s(network))
        start = sum(first_call_s(run["first_conv"]))
        warm = f"{network['thread_warm_s']:.3f}" if "thread_warm_s" in network else "—"
        lines.append(
            f"{head} {calls} | {cost:.3f} | {warm} | {start:.3f} | {run['process_s']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def report(header: dict[str, Any], convs: list[dict[str, Any]], runs: list[dict[str, Any]]) -> str:
    """The markdown page: where it ran, the totals, then every configuration per batch (or,
    with ``--network``, the whole network's calls)."""
    done = [r for r in runs if "error" not in r]
    where = (
        f"torch {done[0]['torch']}, CUDA {done[0]['cuda']}, cuDNN {done[0]['cudnn']}, "
        f"{done[0]['device_name']}, cudnn.benchmark {done[0]['cudnn_benchmark']}"
        if done
        else "no process finished"
    )
    if header["network"]:
        return (
            f"# First call of the whole network: {header['model']} at {header['imgsz']} px\n\n"
            f"{where}. Forward and backward (a sum of the raw outputs as the loss) each timed "
            "with the device synchronised around it; first-call cost: the first call minus the "
            f"second.\n\n{network_table(runs)}"
        )
    by_kind = ", ".join(f"{sum(c['kind'] == k for c in convs)} {k}" for k in _kinds(convs))
    parts = [
        f"# First-call cost of each convolution: {header['model']} at {header['imgsz']} px\n",
        f"{len(convs)} distinct convolutions ({by_kind}); {where}. First-call cost: first "
        "forward+backward minus the second, device synchronised around each; settled: median "
        f"of {header['steady']} calls, counted by the network's uses.\n",
        "## Totals per process\n",
        summary_table(runs, convs),
    ]
    for batch in header["batch"]:
        parts += [
            f"## Every configuration, batch {batch} (round 0)\n",
            config_table(runs, convs, batch),
        ]
    return "\n".join(parts)


def _run_child(
    args: argparse.Namespace, variant: str, batch: int, convs_path: Path
) -> dict[str, Any]:
    """One variant in a fresh process; its run, or why there is none."""
    command = [sys.executable, __file__, "--child", variant, "--convs", str(convs_path)]
    command += ["--batch", str(batch), "--device", args.device, "--steady", str(args.steady)]
    command += ["--model", args.model, "--imgsz", str(args.imgsz)]
    command += ["--num-classes", str(args.num_classes)] + (["--network"] if args.network else [])
    command += ["--warm-in-thread"] if args.warm_in_thread else []
    began = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=args.child_timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"variant": variant, "batch": batch, "error": f"timed out ({args.child_timeout} s)"}
    seconds = time.perf_counter() - began
    results = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not results:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        return {"variant": variant, "batch": batch, "error": " | ".join(tail), "process_s": seconds}
    run: dict[str, Any] = json.loads(results[-1].removeprefix(RESULT))
    run["process_s"] = seconds
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="yolo26n")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument(
        "--num-classes",
        type=int,
        help="default: the embedded synthetic dataset's, as in the fit that motivates this",
    )
    parser.add_argument("--batch", type=int, nargs="+", default=[16])
    parser.add_argument(
        "--layouts",
        nargs="+",
        choices=list(LAYOUTS),
        default=["channels_last", "contiguous"],
        help=f"{DW_NCHW!r} wraps a whole network: with --network only",
    )
    parser.add_argument(
        "--depthwise-without-cudnn",
        action="store_true",
        help=f"also run each layout with cuDNN off around the depthwise convolutions "
        f"({DEPTHWISE_NATIVE!r} variants)",
    )
    parser.add_argument(
        "--network",
        action="store_true",
        help="instead: the whole network's first and second forward+backward, per layout",
    )
    parser.add_argument(
        "--warm-in-thread",
        action="store_true",
        help="with --network: run a copy of the network once on another thread first",
    )
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds of variants")
    parser.add_argument("--steady", type=int, default=20, help="settled calls per configuration")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run")
    parser.add_argument("--child-timeout", type=float, default=300.0, help="seconds per process")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--convs", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.network and args.depthwise_without_cudnn:
        parser.error("--depthwise-without-cudnn times configurations; leave it out with --network")
    if args.warm_in_thread and not args.network:
        parser.error("--warm-in-thread warms the whole network: add --network")
    if DW_NCHW in args.layouts and not args.network:
        parser.error(f"--layouts {DW_NCHW!r} changes the network, not a convolution: add --network")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device!r}: no CUDA device here; --device cpu for a smoke run")
    if args.child is not None:
        if args.network:
            run = run_network(
                args.child,
                args.model,
                args.num_classes,
                args.imgsz,
                args.batch[0],
                device,
                warm_in_thread=args.warm_in_thread,
            )
        else:
            fields = json.loads(args.convs.read_text())
            configs = [ConvConfig.from_json(conv["config"]) for conv in fields]
            run = run_variant(args.child, configs, args.batch[0], device, args.steady)
        print(RESULT + json.dumps(run), flush=True)
        return
    if args.num_classes is None:
        # imported here, not at the top: the training package pulls in Lightning (seconds),
        # which the children do not need
        from lucid_yolo.train.data.synthetic_shapes import SHAPE_CLASSES

        args.num_classes = len(SHAPE_CLASSES)
    counts = network_convs(args.model, args.imgsz, args.num_classes)
    convs = [
        {"config": asdict(c), "kind": c.kind, "count": n, "label": c.describe()}
        for c, n in counts.items()
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    convs_path = args.out / "first_conv_configs.json"
    convs_path.write_text(json.dumps(convs, indent=1) + "\n")
    header = {
        "model": args.model,
        "imgsz": args.imgsz,
        "num_classes": args.num_classes,
        "batch": args.batch,
        "steady": args.steady,
        "network": args.network,
    }
    variants = variant_names(args.layouts, args.depthwise_without_cudnn)
    name = "network_first_call" if args.network else "first_conv"
    runs: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for batch in args.batch:
            for variant in round_order(variants, round_):
                run = {**_run_child(args, variant, batch, convs_path), "round": round_}
                if "rows" in run:
                    run["summary"] = run_summary(run, convs)
                runs.append(run)
                print(json.dumps({k: v for k, v in run.items() if k != "rows"}), flush=True)
                result = {**header, "convs": convs, "runs": runs}
                (args.out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
                (args.out / f"{name}.md").write_text(report(header, convs, runs))
    print(report(header, convs, runs), end="")


if __name__ == "__main__":
    main()
