"""A fit whose loss goes non-finite (issue 15): stops before the update, or skips it; fp16 and
replay behave as native.

A NaN is written into one target box of the first micro-batch of optimizer step
:data:`POISONED`, which makes that step's loss NaN (the assigner and the box loss read it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lucid_yolo.replay import first_difference, state_digest
from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
from lucid_yolo.train.non_finite_loss import NonFiniteLossError

pytestmark = pytest.mark.filterwarnings(
    "ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"
)

POISONED = 3
"""The optimizer step (1-based) whose first micro-batch carries a NaN box."""

GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


class _PoisonBox(Callback):
    """NaN in the first valid box of the first micro-batch of step :data:`POISONED`."""

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        first = batch_idx % trainer.accumulate_grad_batches == 0
        if trainer.global_step + 1 == POISONED and first:
            image, instance = batch["valid"].nonzero()[0].tolist()
            batch["boxes"][image, instance, 0] = float("nan")


class _StepStates(Callback):
    """Digests of the weights, buffers, EMA and optimizer after every micro-batch, and the
    losses.

    A skipped update leaves everything but the BatchNorm statistics, which the step's forward
    has already moved (as under fp16's GradScaler): :func:`_trained_state` drops them.
    """

    def __init__(self) -> None:
        self.states: list[dict[str, str]] = []
        self.losses: list[float] = []

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, *_: Any
    ) -> None:
        assert isinstance(pl_module, YoloModule)
        self.losses.append(float(outputs["loss"].detach().float()))
        self.states.append(
            state_digest(
                {
                    "params": dict(pl_module.net.named_parameters()),
                    "buffers": dict(pl_module.net.named_buffers()),
                    "ema": pl_module.ema_net.state_dict(),
                    "optimizer": trainer.optimizers[0].state_dict(),
                }
            )
        )


def _trained_state(digests: dict[str, str]) -> dict[str, str]:
    """What a skipped update must leave as it was: weights, EMA and optimizer state. The
    schedule (``param_groups``' learning rates) still advances, as under fp16's GradScaler."""
    moving = ("buffers.", "optimizer.param_groups.")
    return {k: v for k, v in digests.items() if not k.startswith(moving)}


def _fit(
    yaml: Path,
    policy: str,
    *,
    accelerator: str = "cpu",
    precision: str = "32-true",
    replay: ReplayConfig = ReplayConfig(),  # noqa: B008 (frozen)
    max_steps: int = 4,
    checkpoints: Path | None = None,
) -> tuple[YoloModule, pl.Trainer, _StepStates]:
    pl.seed_everything(0)
    data = YoloDataModule(yaml, imgsz=64, batch_size=4, workers=0, max_instances=48, seed=0)
    module = YoloModule(
        "yolo26n",
        num_classes=data.num_classes,
        warmup_epochs=0.0,
        replay=replay,
        non_finite_loss=policy,  # type: ignore[arg-type]
    )
    states = _StepStates()
    callbacks: list[Callback] = [_PoisonBox(), states]
    if checkpoints is not None:
        callbacks.append(
            ModelCheckpoint(
                dirpath=checkpoints, filename="{step}", every_n_train_steps=1, save_top_k=-1
            )
        )
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=precision,  # type: ignore[arg-type]
        max_steps=max_steps,
        limit_val_batches=0,
        deterministic=True,
        logger=False,
        enable_checkpointing=checkpoints is not None,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    trainer.fit(module, data)
    return module, trainer, states


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_fit_stops_before_the_update_of_a_non_finite_step(
    tiny_dataset: Any, tmp_path: Path, precision: str
) -> None:
    with pytest.raises(NonFiniteLossError, match=rf"step {POISONED}: .*non-finite terms: total"):
        _fit(tiny_dataset("detect"), "stop", precision=precision, checkpoints=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step=1.ckpt", "step=2.ckpt"]


def test_fit_stopped_by_non_finite_loss_keeps_weights_of_the_last_good_step(
    tiny_dataset: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modules: list[YoloModule] = []
    monkeypatch.setattr(
        YoloModule, "on_fit_start", lambda self: (modules.append(self), self.ema.rebind())
    )
    with pytest.raises(NonFiniteLossError):
        _fit(tiny_dataset("detect"), "stop", checkpoints=tmp_path)
    saved = torch.load(tmp_path / "step=2.ckpt", weights_only=True)["state_dict"]
    module = modules[0]
    live = {
        **{f"net.{k}": p for k, p in module.net.named_parameters()},
        **{f"ema_net.{k}": v for k, v in module.ema_net.state_dict().items()},
    }
    saved = {k: saved[k] for k in live}
    assert first_difference(state_digest(saved), state_digest(live)) is None
    assert all(torch.isfinite(p).all() for p in modules[0].net.parameters())


def test_fit_skip_leaves_weights_ema_and_optimizer_unchanged_at_the_bad_step(
    tiny_dataset: Any,
) -> None:
    module, trainer, states = _fit(tiny_dataset("detect"), "skip")
    assert module.loss_guard.skipped == 1
    assert trainer.global_step == 4
    assert int(module.ema.updates) == 3
    before, at, after = (_trained_state(states.states[POISONED - 2 + i]) for i in range(3))
    assert first_difference(before, at) is None
    assert first_difference(at, after) is not None
    assert all(torch.isfinite(p).all() for p in module.net.parameters())


def test_fit_skip_count_survives_a_checkpoint(tiny_dataset: Any, tmp_path: Path) -> None:
    _fit(tiny_dataset("detect"), "skip", checkpoints=tmp_path)
    checkpoint = torch.load(tmp_path / "step=4.ckpt", weights_only=True)
    restored = YoloModule("yolo26n", num_classes=5, non_finite_loss="skip")
    restored.on_load_checkpoint(checkpoint)
    assert restored.loss_guard.skipped == 1


def test_fit_skip_replayed_on_cpu_stand_in_equals_native(tiny_dataset: Any) -> None:
    yaml = tiny_dataset("detect")
    native = _fit(yaml, "skip")
    replayed = _fit(yaml, "skip", replay=ReplayConfig(network=True, update=True))
    assert replayed[0].loss_guard.skipped == native[0].loss_guard.skipped == 1
    assert replayed[0].replay_telemetry.as_dict()["retirements"] == 0
    assert first_difference(native[2].states[-1], replayed[2].states[-1]) is None
    assert native[2].losses[POISONED - 1] != native[2].losses[POISONED - 1]  # NaN


@pytest.mark.usefixtures("deterministic")
@pytest.mark.parametrize(
    ("precision", "policy"),
    [
        pytest.param("16-mixed", "stop", marks=GPU),
        pytest.param("bf16-mixed", "skip", marks=GPU),
    ],
)
def test_gpu_non_finite_step_replayed_equals_native(
    precision: str, policy: str, tiny_dataset: Any
) -> None:
    yaml = tiny_dataset("detect")
    replay = ReplayConfig(network=True, loss=True, update=True)
    native = _fit(yaml, policy, accelerator="gpu", precision=precision, max_steps=6)
    replayed = _fit(
        yaml, policy, accelerator="gpu", precision=precision, max_steps=6, replay=replay
    )
    assert first_difference(native[2].states[-1], replayed[2].states[-1]) is None
    assert [str(v) for v in native[2].losses] == [str(v) for v in replayed[2].losses]
    assert int(native[0].ema.updates) == int(replayed[0].ema.updates) < 6
    assert replayed[0].replay_telemetry.as_dict()["retirements"] == 0
    scalers = [getattr(t.precision_plugin, "scaler", None) for t in (native[1], replayed[1])]
    if precision == "16-mixed":
        # fp16: GradScaler skipped the NaN step and backed off, exactly as natively
        assert scalers[0] is not None
        assert scalers[1] is not None
        assert scalers[0].state_dict() == scalers[1].state_dict()
