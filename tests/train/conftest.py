"""Shared fixtures of the train tests: tiny synthetic datasets and digested fits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from lucid_yolo.models.registry import TASK_SUFFIXES
from lucid_yolo.replay import state_digest
from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
from lucid_yolo.train.data.synthetic import generate_synthetic
from lucid_yolo.train.memory_format import MemoryFormat
from lucid_yolo.train.optim import NewtonSchulzChoice


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny_dataset(task)`` → the ``data.yaml`` of 8 train / 4 val synthetic images at 128 px."""
    made: dict[str, Path] = {}

    def make(task: str) -> Path:
        if task not in made:
            root = tmp_path_factory.mktemp(f"tiny-{task}")
            made[task] = generate_synthetic(
                root,
                task=task,
                num_train=8,
                num_val=4,
                imgsz=128,
                seed=0,  # type: ignore[arg-type]
            )
        return made[task]

    return make


@dataclass
class DigestedFit:
    """What a parity comparison reads from one fit."""

    digests: dict[str, str]
    losses: list[str]
    telemetry: dict[str, int]
    ema_updates: int
    module: YoloModule
    regions: dict[str, dict[str, int]]
    """Telemetry per recorder, by name (``network``, ``segment-heads``, ``loss``,
    ``network+loss``, ``optimizer MuSGD``)."""
    val: list[dict[str, str]]
    """The bits of each validation pass's metrics after the sanity check (``validate``)."""
    val_outputs: list[dict[str, str]]
    """Digests of every evaluation forward's outputs, sanity check included (``validate``)."""

    @property
    def network_replays(self) -> int:
        """Replays of the recorder that runs the network: alone (``network``) or with its loss
        (``network+loss``, the default where both replay)."""
        name = "network+loss" if "network+loss" in self.regions else "network"
        return self.regions[name]["replays"]


def _bits(value: Tensor) -> str:
    """A logged scalar's float32 bits, as hex."""
    return value.detach().float().cpu().numpy().tobytes().hex()


class _LossBits(Callback):
    def __init__(self) -> None:
        self.losses: list[str] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *_: Any) -> None:
        self.losses.append(_bits(outputs["loss"]))


class _ValBits(Callback):
    def __init__(self) -> None:
        self.val: list[dict[str, str]] = []

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        self.val.append(
            {
                k: _bits(v)
                for k, v in sorted(trainer.callback_metrics.items())
                if k.startswith("val/")
            }
        )


def digested_fit(
    yaml: Path,
    task: str,
    precision: str,
    accumulate: int,
    *,
    accelerator: str = "gpu",
    imgsz: int = 128,
    max_steps: int = 6,
    weights: str | None = None,
    memory_format: MemoryFormat = "auto",
    casts_weights_together: bool | None = None,
    replay: ReplayConfig = ReplayConfig(),  # noqa: B008 (frozen, so one shared default)
    grad_clip_norm: float | None = None,
    newton_schulz_dtype: NewtonSchulzChoice = "auto",
    gradient_clip_val: float | None = None,
    callbacks: list[Callback] | None = None,
    max_instances: int | None = 48,
    validate: bool = False,
) -> DigestedFit:
    """A short seeded fit (from pretrained ``weights`` when given); digests of model, EMA,
    optimizer (and scaler), learning-rate schedule, per-step loss bits. ``memory_format`` is
    the module's option (``auto``: channels-last on CUDA, NCHW on the CPU), and so is
    ``casts_weights_together`` (``None``: the module's default, so that the
    parity tests run what a fit runs by default).
    ``grad_clip_norm`` is the module's clip (``None``: the module's default),
    ``newton_schulz_dtype`` the module's, ``gradient_clip_val`` the trainer's (by norm);
    ``callbacks`` join the loss recorder; ``max_instances`` the data module's target rows
    (``None``: its choice); ``validate`` validates every epoch (2 training batches) in
    batches of 2 (2 a pass) and records each pass's metric bits and each evaluation
    forward's output digests."""
    pl.seed_everything(0)
    data = YoloDataModule(
        yaml,
        task=task,
        imgsz=imgsz,
        batch_size=4,
        val_batch_size=2 if validate else None,
        workers=0,
        max_instances=max_instances,
        seed=0,
    )
    suffix = TASK_SUFFIXES[task]
    module_options: dict[str, Any] = {}
    if grad_clip_norm is not None:
        module_options["grad_clip_norm"] = grad_clip_norm
    if casts_weights_together is not None:
        module_options["casts_weights_together"] = casts_weights_together
    shape = data.spec.kpt_shape
    module = YoloModule(
        f"yolo26n{suffix}",
        num_classes=data.num_classes,
        kpt_shape=(17, 3) if shape is None else (shape[0], 3),
        warmup_epochs=0.0,
        weights=weights,
        replay=replay,
        memory_format=memory_format,
        newton_schulz_dtype=newton_schulz_dtype,
        **module_options,
    )
    losses, val = _LossBits(), _ValBits()
    val_outputs: list[dict[str, str]] = []
    if validate:
        # what the evaluator receives, read before the next forward: a module hook on the EMA
        # network would make a replayed evaluation forward retire
        update = module.evaluator.update

        def digested_update(outputs: dict[str, Tensor], batch: Any) -> None:
            val_outputs.append(state_digest(outputs))
            update(outputs, batch)

        module.evaluator.update = digested_update  # type: ignore[method-assign]
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=precision,  # type: ignore[arg-type]
        max_steps=max_steps,
        accumulate_grad_batches=accumulate,
        limit_val_batches=1.0 if validate else 0,
        deterministic=True,
        benchmark=False,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[losses, val, *(callbacks or [])],
        gradient_clip_val=gradient_clip_val,
    )
    trainer.fit(module, data)
    state: dict[str, Any] = {
        "model": module.net.state_dict(),
        "ema": module.ema_net.state_dict(),
        "optimizer": trainer.optimizers[0].state_dict(),
        "scheduler": [config.scheduler for config in trainer.lr_scheduler_configs],
    }
    scaler = getattr(trainer.precision_plugin, "scaler", None)
    if scaler is not None:
        state["scaler"] = scaler.state_dict()
    return DigestedFit(
        state_digest(state),
        losses.losses,
        module.replay_telemetry.as_dict(),
        int(module.ema.updates),
        module,
        {r.name: r.telemetry.as_dict() for r in module.replay_recorders()},
        val.val,
        val_outputs,
    )


@pytest.fixture
def fit_digests() -> Callable[..., DigestedFit]:
    """:func:`digested_fit`, for tests that compare a native and a replayed fit."""
    return digested_fit


@pytest.fixture(scope="module")
def shared_fit() -> Callable[..., DigestedFit]:
    """:func:`digested_fit` run once per test module for each set of arguments, for a fit that
    several of the module's tests compare with and only read (a native reference): a CPU fit of
    a few steps costs 1 to 4 s. Hands every caller the same :class:`DigestedFit`, so a test
    must not change it (its module, trainer or lists), nor patch anything that the fit should
    have run under: those take :func:`fit_digests`. Arguments must be hashable (no
    ``callbacks``)."""
    made: dict[tuple[Any, ...], DigestedFit] = {}

    def fit(yaml: Path, task: str, precision: str, accumulate: int, **options: Any) -> DigestedFit:
        key = (yaml, task, precision, accumulate, tuple(sorted(options.items())))
        if key not in made:
            made[key] = digested_fit(yaml, task, precision, accumulate, **options)
        return made[key]

    return fit
