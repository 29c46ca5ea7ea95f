"""Can the depthwise convolutions' first-call compilation run while Lightning imports?

Why (issue 11, docs/engineering/whole-fit-speed.md, session 25): a replayed detect fit's first
epoch is about 5.6 s longer than the others and its start-up 8.9 s longer than Ultralytics'.
Session 9 put 4-9 s of the first step in cuDNN's run-time compilation of the channels-last
depthwise convolutions; session 10 showed that compiled code is kept per process (a copy of the
network run on another thread spared the main thread's first backward), but warming on a thread
during the fit's set-up slowed the sanity check beside it and started training later. Before a
fit's set-up there are seconds of pure Python on the main thread: importing Lightning and what
it pulls in. A thread compiling the depthwise convolutions then would touch no CUDA work of the
main thread's. Whether that saves anything depends on two facts this probe measures:

* does a warm-up at a small shape (one image, 16×16) compile what the fit's shapes use, or does
  cuDNN compile per shape (then the warm-up needs the fit's batch and size, known only after
  the command line is parsed, which is after Lightning is imported)?
* does the thread slow the import beside it (the GIL, the CPU)?

Each variant runs in a fresh process, which imports torch and the packaged models first. Then
the main thread imports ``lightning.pytorch`` while the variant's thread (none for ``cold``)
starts CUDA and runs each depthwise
configuration of the network (``tools/network_convs.py``) once forward and backward in bf16
autocast, channels-last, in the variant's shape:

* ``cold``: no thread;
* ``exact``: the fit's batch and each convolution's own input size;
* ``exact-one-image``: the same with one image (does cuDNN compile per batch?);
* ``exact-forward``: the fit's shapes, forward only (is the compiled code the forward's?);
* ``exact-weight-grad``: the fit's shapes, the input without a gradient (the weight's alone);
* ``small``: one image of 16×16, the convolution's own channels;
* ``other-channels``: one image of 16×16 and 32 channels, one per kernel, stride, padding and
  whether the input takes a gradient;
* ``exact-ops``: the fit's shapes, each convolution's forward and backward called as ATen
  operators on this thread, not through autograd (whose backward runs on the device's one
  worker thread, whichever thread calls it);
* ``exact-parallel``: the same calls, one thread per configuration, all started at once: does
  cuDNN compile several configurations' engines at the same time (session 29)?

Then the main thread joins the thread and times the whole network's first and second
forward+backward at the fit's batch and size (bf16 autocast, channels-last, a sum of the raw
outputs as the loss): the first call's excess over the second is what the warm-up left to pay.
``ready_s`` (from the child's first line of work, torch imported, to the second call's end) is
the number that decides.

Run (GPU machine, from source; ``$OUT/depthwise_warm.json`` and ``.md``)::

    python3 tools/probe_depthwise_warm.py --batch 16 --rounds 2

Session 25 found the compiled code per shape (``small`` spared far less than ``exact``) and then
ran::

    python3 tools/probe_depthwise_warm.py --batch 16 --rounds 2 \
        --variants cold exact exact-one-image exact-forward exact-weight-grad

Whether cuDNN's deterministic engines avoid the compilation (``cold`` with the flag, against
``cold`` without it; ``tools/bench_memory_format.py`` times the step that choice gives)::

    python3 tools/probe_depthwise_warm.py --batch 16 --rounds 2 --variants cold \
        --cudnn-deterministic

Whether the compilation runs faster on several threads at once (session 29)::

    python3 tools/probe_depthwise_warm.py --batch 16 --rounds 2 \
        --variants cold exact exact-ops exact-parallel

Session 29 found that plans built on other threads spare the network nothing (PyTorch keeps
cuDNN's plans per thread, and autograd runs the backward on the device's worker thread), and
that nine threads took longer than one.

CPU smoke run (timings meaningless; the thread runs on the CPU)::

    python3 tools/probe_depthwise_warm.py --device cpu --imgsz 64 --batch 2 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from lucid_yolo.models import create_model
from network_convs import ConvConfig, network_convs
from probe_first_conv import _cudnn_version, _forward, _sync, first_and_second_calls

VARIANTS = (
    "cold",
    "exact",
    "exact-one-image",
    "exact-forward",
    "exact-weight-grad",
    "small",
    "other-channels",
    "exact-ops",
    "exact-parallel",
)
OPERATOR_VARIANTS = ("exact-ops", "exact-parallel")
"""The variants whose calls go to ATen's operators directly (:func:`run_operator_calls`)."""
SMALL_SIDE = 16
"""The side of a ``small`` or ``other-channels`` warm-up input."""
OTHER_CHANNELS = 32
RESULT = "probe_depthwise_warm: "
"""Prefix of the line a child prints its result on."""


@dataclass(frozen=True)
class WarmCall:
    """One convolution the warm-up thread runs: its configuration, its batch (0: the fit's),
    and whether a backward follows the forward."""

    config: ConvConfig
    batch: int
    backward: bool = True


def warm_calls(configs: list[ConvConfig], variant: str) -> list[WarmCall]:
    """The depthwise convolutions a ``variant``'s thread runs."""
    depthwise = [c for c in configs if c.kind == "depthwise"]
    if variant == "cold":
        return []
    if variant in ("exact", *OPERATOR_VARIANTS):
        return [WarmCall(c, 0) for c in depthwise]
    if variant == "exact-one-image":
        return [WarmCall(c, 1) for c in depthwise]
    if variant == "exact-forward":
        return [WarmCall(c, 0, backward=False) for c in depthwise]
    if variant == "exact-weight-grad":
        return [WarmCall(replace(c, input_requires_grad=False), 0) for c in depthwise]
    if variant == "small":
        return [WarmCall(replace(c, height=SMALL_SIDE, width=SMALL_SIDE), 1) for c in depthwise]
    if variant == "other-channels":
        shapes: dict[ConvConfig, None] = {}
        for c in depthwise:
            other = replace(
                c,
                in_channels=OTHER_CHANNELS,
                out_channels=OTHER_CHANNELS,
                groups=OTHER_CHANNELS,
                height=SMALL_SIDE,
                width=SMALL_SIDE,
            )
            shapes.setdefault(other)
        return [WarmCall(c, 1) for c in shapes]
    raise ValueError(f"variant {variant!r}: not one of {', '.join(VARIANTS)}")


def run_warm_calls(
    calls: list[WarmCall],
    batch: int,
    where: torch.device,
    memory_format: torch.memory_format = torch.channels_last,
) -> None:
    """Each call once, forward (and backward), under bf16 autocast, on fresh modules and inputs:
    what it leaves behind is cuDNN's plans and compiled code. No random numbers are drawn
    (weights as allocated, inputs of ones), so a thread beside a fit leaves its generators be."""
    for call in calls:
        config = call.config
        conv = config.standalone(initialised=False).to(where).to(memory_format=memory_format)
        shape = (call.batch or batch, config.in_channels, config.height, config.width)
        x = torch.ones(shape, device=where, dtype=getattr(torch, config.input_dtype))
        x = x.to(memory_format=memory_format).requires_grad_(config.input_requires_grad)
        y = _forward(conv, x)
        if call.backward:
            torch.autograd.backward(y, torch.ones_like(y))


def operator_call(
    call: WarmCall,
    batch: int,
    where: torch.device,
    memory_format: torch.memory_format = torch.channels_last,
) -> tuple[torch.Tensor | None, ...]:
    """``call`` as the bf16 convolution autocast runs, and its backward as autograd asks for it
    (the input's gradient where the input takes one, the weight's, the bias's where there is
    one), through ATen's operators on the calling thread. Inputs, weights and output gradients
    are ones: no random numbers are drawn. Returns the output, then the gradients
    (``None`` for those not asked for; none at all without a backward)."""
    config = call.config
    bf16: dict[str, Any] = {"device": where, "dtype": torch.bfloat16}
    shape = (call.batch or batch, config.in_channels, config.height, config.width)
    x = torch.ones(shape, **bf16).to(memory_format=memory_format)
    module_weight = config.standalone(initialised=False).weight
    if not isinstance(module_weight, torch.Tensor):
        raise TypeError(f"{config}: the module's weight is a {type(module_weight).__name__}")
    weight = torch.ones(module_weight.shape, **bf16).to(memory_format=memory_format)
    bias = torch.ones(config.out_channels, **bf16) if config.bias else None
    geometry = (config.stride, config.padding, config.dilation, config.transposed)
    y = torch.ops.aten.convolution(x, weight, bias, *geometry, config.output_padding, config.groups)
    if not call.backward:
        return (y,)
    grads = torch.ops.aten.convolution_backward(
        torch.ones_like(y),
        x,
        weight,
        [config.out_channels] if config.bias else None,
        *geometry,
        config.output_padding,
        config.groups,
        [config.input_requires_grad, True, config.bias],
    )
    return (y, *grads)


def run_operator_calls(
    calls: list[WarmCall], batch: int, where: torch.device, *, parallel: bool
) -> None:
    """Every call through :func:`operator_call`, in order on this thread, or ``parallel``: one
    thread each, all started before any is joined; a thread's error is raised here."""
    if not parallel:
        for call in calls:
            operator_call(call, batch, where)
        return
    errors: list[BaseException] = []

    def one(call: WarmCall) -> None:
        try:
            operator_call(call, batch, where)
        except BaseException as error:  # raised below, on the caller's thread
            errors.append(error)

    threads = [threading.Thread(target=one, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _warm(
    calls: list[WarmCall], variant: str, batch: int, device: str, out: dict[str, Any]
) -> None:
    """The thread's work: the device, then each call forward (and backward)."""
    began = time.perf_counter()
    try:
        where = torch.device(device)
        torch.zeros(1, device=where)
        _sync(where)
        out["thread_device_s"] = time.perf_counter() - began
        if variant in OPERATOR_VARIANTS:
            run_operator_calls(calls, batch, where, parallel=variant == "exact-parallel")
        else:
            run_warm_calls(calls, batch, where)
        _sync(where)
    except BaseException as error:  # reported by the main thread
        out["thread_error"] = repr(error)
    out["thread_s"] = time.perf_counter() - began


def run_child(variant: str, configs: list[ConvConfig], args: argparse.Namespace) -> dict[str, Any]:
    """One variant in this fresh process: the import beside the warm-up, then the network."""
    torch.backends.cudnn.deterministic = args.cudnn_deterministic
    began = time.perf_counter()
    warm = warm_calls(configs, variant)
    thread_out: dict[str, Any] = {}
    thread = threading.Thread(
        target=_warm, args=(warm, variant, args.batch, args.device, thread_out)
    )
    if warm:
        thread.start()
    import lightning.pytorch  # noqa: F401  (the import the thread runs beside)

    imported = time.perf_counter()
    if warm:
        thread.join()
    joined = time.perf_counter()
    device = torch.device(args.device)
    model = create_model(args.model, num_classes=args.num_classes).to(device)
    model = model.to(memory_format=torch.channels_last)
    images = torch.rand(args.batch, 3, args.imgsz, args.imgsz, device=device)
    images = images.to(memory_format=torch.channels_last)
    network = first_and_second_calls(model, images)
    ready = time.perf_counter()
    return {
        "variant": variant,
        "warm_convs": len(warm),
        "lightning_import_s": imported - began,
        "join_wait_s": joined - imported,
        **thread_out,
        **network,
        "first_call_excess_s": network["first_forward_s"]
        + network["first_backward_s"]
        - network["second_forward_s"]
        - network["second_backward_s"],
        "ready_s": ready - began,
        "cudnn": _cudnn_version() if device.type == "cuda" else None,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
    }


def _run_child(args: argparse.Namespace, variant: str, convs_path: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", variant, "--convs", str(convs_path)]
    command += ["--batch", str(args.batch), "--device", args.device, "--model", args.model]
    command += ["--imgsz", str(args.imgsz), "--num-classes", str(args.num_classes)]
    command += ["--cudnn-deterministic"] if args.cudnn_deterministic else []
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=args.child_timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"variant": variant, "error": f"timed out ({args.child_timeout} s)"}
    results = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not results:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        return {"variant": variant, "error": " | ".join(tail)}
    run: dict[str, Any] = json.loads(results[-1].removeprefix(RESULT))
    return run


COLUMNS = (
    "lightning_import_s",
    "thread_s",
    "join_wait_s",
    "first_call_excess_s",
    "ready_s",
)


def _failed(run: dict[str, Any]) -> str:
    """Why a run counts for nothing (its process, or its warm-up thread, failed); empty if it
    counts: a warm-up that failed would read as one that spared nothing."""
    return str(run.get("error") or run.get("thread_error") or "")


def table(runs: list[dict[str, Any]]) -> str:
    """Per variant: the median (and range) of each column over its rounds."""
    lines = [
        "| variant | runs | warm convs | " + " | ".join(COLUMNS) + " |",
        "|---|---:|---:|" + "---:|" * len(COLUMNS),
    ]
    for variant in VARIANTS:
        done = [r for r in runs if r["variant"] == variant and not _failed(r)]
        if not done:
            continue
        cells = []
        for column in COLUMNS:
            values = [r[column] for r in done if column in r]
            cells.append(
                f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"
                if values
                else "—"
            )
        lines.append(
            f"| {variant} | {len(done)} | {done[0]['warm_convs']} | " + " | ".join(cells) + " |"
        )
    lines += [f"\n{r['variant']} failed: {_failed(r)}" for r in runs if _failed(r)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="yolo26n")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--num-classes", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of variants")
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--cudnn-deterministic",
        action="store_true",
        help="every process with torch.backends.cudnn.deterministic on (cuDNN's engine choice)",
    )
    parser.add_argument("--child-timeout", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--convs", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        configs = [ConvConfig.from_json(c) for c in json.loads(args.convs.read_text())]
        print(RESULT + json.dumps(run_child(args.child, configs, args)), flush=True)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    convs_path = args.out / "depthwise_warm_configs.json"
    configs = list(network_convs(args.model, args.imgsz, args.num_classes))
    convs_path.write_text(json.dumps([asdict(c) for c in configs]) + "\n")
    runs: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        order = args.variants if round_ % 2 == 0 else args.variants[::-1]
        for variant in order:
            run = {**_run_child(args, variant, convs_path), "round": round_}
            runs.append(run)
            print(json.dumps(run), flush=True)
            (args.out / "depthwise_warm.json").write_text(json.dumps(runs, indent=1) + "\n")
            (args.out / "depthwise_warm.md").write_text(table(runs))
    print(table(runs))


if __name__ == "__main__":
    main()
