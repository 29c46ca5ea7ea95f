"""A Lightning callback that warms cuDNN's depthwise convolutions at a fit's shapes on a thread.

Why (issue 11, docs/engineering/whole-fit-speed.md, sessions 25-26): a replayed detect fit's
first epoch is about 5 s longer than the others. In a bare network about 3.5 s of the first
forward and backward is cuDNN compiling the channels-last depthwise convolutions' backward,
per shape (batch included), and a thread that ran them at the fit's shapes beside Lightning's
import spared most of it (``tools/probe_depthwise_warm.py``). Session 10's warm-up of the whole
network on a thread beside the set-up lost 1.8 s in a fit, so whether a depthwise-only warm-up
gains in a fit is an open question; this callback asks it in a real ``lucid-yolo fit`` without
touching the trainer. It starts the thread at ``on_fit_start`` (the model is on its device, the
data module knows the batch and the image size) and joins it at ``on_train_start``, so that the
thread runs beside the sanity check. The thread works on a stream of torch's pool (not one a
replay pool took, unless 32 streams were handed out since: torch lends them in turn) on the
fit's device, and synchronises that stream only: the main thread may be recording a CUDA graph
meanwhile (captures are thread-local). What it frees stays cached on its stream, a few tens of
MB the fit cannot reuse; releasing it would also release the fit's own cache and time a
re-allocation the control fit does not pay, so the measurement keeps it. Its convolutions are
fresh modules on inputs of ones, built without random numbers (``run_warm_calls``), and the
shapes come from a forward on the meta device (``network_convs``): the fit's generators and
values do not move; cuDNN's engine choice for a shape does not depend on who asked first
(heuristics, no benchmark).

The shapes come from that forward at 64 px, scaled to the fit's size (every convolution's input
is the image size over a stride of at most 32, so the scaled sides are exact when the size is a
multiple of 64, as tested for a model of each task; other sizes run the forward at the fit's
size). The convolutions run in the module's memory format.

Usage (``tools/`` on ``PYTHONPATH``; the file named by ``LUCID_DEPTHWISE_WARM`` receives
``thread_s``, ``join_wait_s``, ``convs`` and, when the thread failed, ``thread_error``)::

    python3 tools/bench_side_by_side.py --tasks detect --batch 16 --epochs 3 --tools replay \\
        --lucid-args=--trainer.callbacks+=depthwise_warm_callback.DepthwiseWarmUp

Only for bf16 mixed precision (the fits of the benchmarks): another precision records
``skipped``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from network_convs import ConvConfig, network_convs
from probe_depthwise_warm import run_warm_calls, warm_calls

RESULT_ENV = "LUCID_DEPTHWISE_WARM"
"""Environment variable naming the JSON file the callback writes."""
SHAPE_SIDE = 64
"""The image side of the CPU forward that finds the shapes (a multiple of the largest stride)."""


def fit_configs(model: str, imgsz: int, num_classes: int) -> list[ConvConfig]:
    """The distinct convolutions of ``model``'s training forward at ``imgsz``."""
    if imgsz % SHAPE_SIDE:
        return list(network_convs(model, imgsz, num_classes))
    scale = imgsz // SHAPE_SIDE
    return [
        dataclasses.replace(c, height=c.height * scale, width=c.width * scale)
        for c in network_convs(model, SHAPE_SIDE, num_classes)
    ]


@dataclasses.dataclass(frozen=True)
class WarmedFit:
    """What the thread needs to know of the fit."""

    model: str
    imgsz: int
    num_classes: int
    batch: int
    device: torch.device
    memory_format: torch.memory_format


class DepthwiseWarmUp(pl.Callback):
    """Warms the depthwise convolutions' forward and backward at the fit's shapes beside the
    sanity check; writes what the thread took to ``LUCID_DEPTHWISE_WARM``."""

    def __init__(self) -> None:
        self.result: dict[str, Any] = {}
        self._thread: threading.Thread | None = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.precision != "bf16-mixed":
            self.result["skipped"] = f"precision {trainer.precision}, not bf16-mixed"
            return
        datamodule: Any = getattr(trainer, "datamodule", None)
        hparams = pl_module.hparams
        fit = WarmedFit(
            model=hparams["model"],
            imgsz=datamodule.imgsz,
            num_classes=hparams["num_classes"],
            batch=datamodule.batch_size,
            device=pl_module.device,
            memory_format=getattr(pl_module, "memory_format", torch.channels_last),
        )
        self._thread = threading.Thread(target=self._warm, args=(fit,), daemon=True)
        self._thread.start()

    def _warm(self, fit: WarmedFit) -> None:
        began = time.perf_counter()
        try:
            calls = warm_calls(fit_configs(fit.model, fit.imgsz, fit.num_classes), "exact")
            self.result["convs"] = len(calls)
            if fit.device.type == "cuda":
                with torch.cuda.device(fit.device):
                    stream = torch.cuda.Stream(fit.device)  # type: ignore[no-untyped-call]
                    with torch.cuda.stream(stream):
                        run_warm_calls(calls, fit.batch, fit.device, fit.memory_format)
                    stream.synchronize()
            else:
                run_warm_calls(calls, fit.batch, fit.device, fit.memory_format)
        except Exception as error:  # the fit goes on; the record says where the thread stopped
            self.result["thread_error"] = repr(error)
        self.result["thread_s"] = time.perf_counter() - began

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._thread is not None:
            began = time.perf_counter()
            self._thread.join()
            self.result["join_wait_s"] = time.perf_counter() - began
            self._thread = None
        path = os.environ.get(RESULT_ENV)
        if path and trainer.is_global_zero:
            Path(path).write_text(json.dumps(self.result, indent=2))
