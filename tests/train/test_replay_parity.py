"""A replayed fit is bitwise equal to a native fit (CUDA only).

Two fits with the same seed, one with the network region(s) replayed from CUDA graphs: digests
of the model, EMA, optimizer and GradScaler state and every per-step loss must be identical.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from lucid_yolo.replay import first_difference, state_digest
from lucid_yolo.train import YoloDataModule, YoloModule

pytestmark = [
    pytest.mark.gpu,
    # Lightning's advice on loader workers and logging intervals for a deliberately tiny fit.
    pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"),
]


@dataclass
class _Fit:
    digests: dict[str, str]
    losses: list[str]
    telemetry: dict[str, int]


class _LossBits(Callback):
    def __init__(self) -> None:
        self.losses: list[str] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *_: Any) -> None:
        self.losses.append(outputs["loss"].detach().float().cpu().numpy().tobytes().hex())


def _fit(yaml: Path, task: str, precision: str, accumulate: int, **replay: bool) -> _Fit:
    pl.seed_everything(0)
    data = YoloDataModule(
        yaml, task=task, imgsz=128, batch_size=4, workers=0, max_instances=48, seed=0
    )
    suffix = {"detect": "", "segment": "-seg"}[task]
    module = YoloModule(
        f"yolo26n{suffix}", num_classes=data.num_classes, warmup_epochs=0.0, **replay
    )
    losses = _LossBits()
    trainer = pl.Trainer(
        accelerator="gpu",
        devices=1,
        precision=precision,  # type: ignore[arg-type]
        max_steps=6,
        accumulate_grad_batches=accumulate,
        limit_val_batches=0,
        deterministic=True,
        benchmark=False,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[losses],
    )
    trainer.fit(module, data)
    state: dict[str, Any] = {
        "model": module.net.state_dict(),
        "ema": module.ema_net.state_dict(),
        "optimizer": trainer.optimizers[0].state_dict(),
    }
    scaler = getattr(trainer.precision_plugin, "scaler", None)
    if scaler is not None:
        state["scaler"] = scaler.state_dict()
    return _Fit(state_digest(state), losses.losses, module.replay.telemetry())


@pytest.mark.parametrize(
    ("task", "precision", "accumulate", "replay"),
    [
        ("detect", "32-true", 1, {"capture_network": True}),
        ("detect", "bf16-mixed", 1, {"capture_network": True}),
        ("detect", "16-mixed", 1, {"capture_network": True}),
        ("detect", "bf16-mixed", 2, {"capture_network": True}),
        ("segment", "bf16-mixed", 1, {"capture_network": True, "capture_segment_heads": True}),
    ],
)
def test_replayed_fit_is_bitwise_native(
    task: str,
    precision: str,
    accumulate: int,
    replay: dict[str, bool],
    tiny_dataset: Callable[[str], Path],
) -> None:
    yaml = tiny_dataset(task)
    native = _fit(yaml, task, precision, accumulate)
    replayed = _fit(yaml, task, precision, accumulate, **replay)
    assert replayed.telemetry["replays"] > 0, replayed.telemetry
    assert replayed.telemetry["retirements"] == 0, replayed.telemetry
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses
    assert torch.cuda.is_available()
