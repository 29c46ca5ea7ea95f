"""A fit whose loss goes non-finite (issue 15): stops before the update, or skips it; fp16 and
replay behave as native.

A NaN is written into one target box of the first micro-batch of each poisoned optimizer step
(:data:`POISONED` unless a test says otherwise), which makes that step's loss NaN (the assigner
and the box loss read it).

A native update checks the loss before it runs; a replayed one (the CPU stand-in runs the same
bookkeeping) runs first, backed up, and its step's verdict is read late (issue 11,
:mod:`lucid_yolo.train.non_finite_loss`). Both must leave the same bits.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lucid_yolo.replay import first_difference, state_digest
from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
from lucid_yolo.train.non_finite_loss import NonFiniteLossError, NonFiniteLossGuard

pytestmark = pytest.mark.filterwarnings(
    "ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"
)

POISONED = 3
"""The optimizer step (1-based) whose first micro-batch carries a NaN box."""

UPDATE_REPLAY = ReplayConfig(update=True)
"""The update replayed (the CPU stand-in on the CPU): the guard's verdict is read late."""

GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


class _PoisonBox(Callback):
    """NaN in the first valid box of the first micro-batch of each poisoned step."""

    def __init__(self, steps: Collection[int]) -> None:
        self.steps = steps

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        first = batch_idx % trainer.accumulate_grad_batches == 0
        if trainer.global_step + 1 in self.steps and first:
            image, instance = batch["valid"].nonzero()[0].tolist()
            batch["boxes"][image, instance, 0] = float("nan")


class _StepStates(Callback):
    """Digests of the weights, buffers, EMA and optimizer after every micro-batch, and the
    losses.

    A skipped update leaves everything but the BatchNorm statistics, which the step's forward
    has already moved (as under fp16's GradScaler): :func:`_trained_state` drops them. Read at
    the end of a batch, a replayed fit's state may still hold an update whose verdict is
    pending; the tests that read it there run native updates.
    """

    def __init__(self) -> None:
        self.states: list[dict[str, str]] = []
        self.losses: list[float] = []

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, *_: Any
    ) -> None:
        assert isinstance(pl_module, YoloModule)
        self.losses.append(float(outputs["loss"].detach().float()))
        self.states.append(_digest(pl_module, trainer))


def _digest(module: YoloModule, trainer: pl.Trainer) -> dict[str, str]:
    return state_digest(
        {
            "params": dict(module.net.named_parameters()),
            "buffers": dict(module.net.named_buffers()),
            "ema": module.ema_net.state_dict(),
            "ema_updates": module.ema.updates,
            "optimizer": trainer.optimizers[0].state_dict(),
        }
    )


def _trained_state(digests: dict[str, str]) -> dict[str, str]:
    """What a skipped update must leave as it was: weights, EMA and optimizer state. The
    schedule (``param_groups``' learning rates) still advances, as under fp16's GradScaler."""
    moving = ("buffers.", "optimizer.param_groups.")
    return {k: v for k, v in digests.items() if not k.startswith(moving)}


@dataclass
class _Fit:
    module: YoloModule
    trainer: pl.Trainer
    states: _StepStates
    error: NonFiniteLossError | None
    checkpoints: Path | None

    @property
    def digest(self) -> dict[str, str]:
        """The state the fit left in memory."""
        return _digest(self.module, self.trainer)


def _fit(
    yaml: Path,
    policy: str,
    *,
    accelerator: str = "cpu",
    precision: str = "32-true",
    replay: ReplayConfig = ReplayConfig(),  # noqa: B008 (frozen)
    max_steps: int = 4,
    max_epochs: int | None = None,
    accumulate: int = 1,
    poisoned: Collection[int] = (POISONED,),
    validate: bool = False,
    checkpoints: Path | None = None,
    every_step: bool = True,
    extra: Sequence[Callback] = (),
) -> _Fit:
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
    callbacks: list[Callback] = [_PoisonBox(poisoned), states, *extra]
    if checkpoints is not None:
        every = {"every_n_train_steps": 1} if every_step else {}
        callbacks.append(
            ModelCheckpoint(dirpath=checkpoints, filename="{epoch}-{step}", save_top_k=-1, **every)
        )
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=precision,  # type: ignore[arg-type]
        max_steps=max_steps,
        max_epochs=max_epochs,
        accumulate_grad_batches=accumulate,
        limit_val_batches=1 if validate else 0,
        num_sanity_val_steps=0,
        deterministic=True,
        logger=False,
        enable_checkpointing=checkpoints is not None,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    try:
        trainer.fit(module, data)
    except NonFiniteLossError as error:
        return _Fit(module, trainer, states, error, checkpoints)
    return _Fit(module, trainer, states, None, checkpoints)


@pytest.fixture(scope="module")
def native_stop(tiny_dataset: Any, tmp_path_factory: pytest.TempPathFactory) -> _Fit:
    """fp32, ``stop``, native update (checked before it), a checkpoint every step; read-only."""
    folder = tmp_path_factory.mktemp("native-stop")
    return _fit(tiny_dataset("detect"), "stop", checkpoints=folder)


@pytest.fixture(scope="module")
def native_skip(tiny_dataset: Any, tmp_path_factory: pytest.TempPathFactory) -> _Fit:
    """fp32, ``skip``, native update (checked before it), a checkpoint every step; read-only."""
    folder = tmp_path_factory.mktemp("native-skip")
    return _fit(tiny_dataset("detect"), "skip", checkpoints=folder)


def _checkpoint_digests(folder: Path) -> dict[str, dict[str, str]]:
    """Digest of each checkpoint's weights by file name; ``{}`` when none was written."""
    return {
        path.name: state_digest(torch.load(path, weights_only=True)["state_dict"])
        for path in sorted(folder.glob("*.ckpt"))
    }


def _assert_stopped_at_the_poisoned_step(fit: _Fit) -> None:
    assert fit.error is not None
    assert str(fit.error).startswith(f"step {POISONED}: ")
    assert "non-finite terms: total" in str(fit.error)
    assert fit.checkpoints is not None
    assert list(_checkpoint_digests(fit.checkpoints)) == [
        "epoch=0-step=1.ckpt",
        "epoch=0-step=2.ckpt",
    ]


def test_fit_stops_before_the_update_of_a_non_finite_step(native_stop: _Fit) -> None:
    _assert_stopped_at_the_poisoned_step(native_stop)


def test_fit_stops_before_the_update_of_a_non_finite_step_in_bf16(
    tiny_dataset: Any, tmp_path: Path
) -> None:
    fit = _fit(tiny_dataset("detect"), "stop", precision="bf16-mixed", checkpoints=tmp_path)
    _assert_stopped_at_the_poisoned_step(fit)


def test_fit_stopped_by_non_finite_loss_keeps_weights_of_the_last_good_step(
    native_stop: _Fit,
) -> None:
    assert native_stop.checkpoints is not None
    saved = torch.load(native_stop.checkpoints / "epoch=0-step=2.ckpt", weights_only=True)
    module = native_stop.module
    live = {
        **{f"net.{k}": p for k, p in module.net.named_parameters()},
        **{f"ema_net.{k}": v for k, v in module.ema_net.state_dict().items()},
    }
    weights = {k: saved["state_dict"][k] for k in live}
    assert first_difference(state_digest(weights), state_digest(live)) is None
    assert all(torch.isfinite(p).all() for p in module.net.parameters())


def test_fit_skip_leaves_weights_ema_and_optimizer_unchanged_at_the_bad_step(
    native_skip: _Fit,
) -> None:
    fit = native_skip
    assert fit.module.loss_guard.skipped == 1
    assert fit.trainer.global_step == 4
    assert int(fit.module.ema.updates) == 3
    before, at, after = (_trained_state(fit.states.states[POISONED - 2 + i]) for i in range(3))
    assert first_difference(before, at) is None
    assert first_difference(at, after) is not None
    assert all(torch.isfinite(p).all() for p in fit.module.net.parameters())


def test_fit_skip_count_survives_a_checkpoint(native_skip: _Fit) -> None:
    assert native_skip.checkpoints is not None
    checkpoint = torch.load(native_skip.checkpoints / "epoch=1-step=4.ckpt", weights_only=True)
    restored = YoloModule("yolo26n", num_classes=5, non_finite_loss="skip")
    restored.on_load_checkpoint(checkpoint)
    assert restored.loss_guard.skipped == 1


def test_fit_skip_replayed_on_cpu_stand_in_equals_native(
    tiny_dataset: Any, native_skip: _Fit
) -> None:
    native = native_skip
    replayed = _fit(tiny_dataset("detect"), "skip", replay=ReplayConfig(network=True, update=True))
    assert replayed.module.loss_guard.skipped == native.module.loss_guard.skipped == 1
    assert replayed.module.replay_telemetry.as_dict()["retirements"] == 0
    assert first_difference(native.digest, replayed.digest) is None
    assert native.states.losses[POISONED - 1] != native.states.losses[POISONED - 1]  # NaN


def test_fit_late_stop_leaves_the_state_of_the_check_before_the_update(
    tiny_dataset: Any, tmp_path: Path, native_stop: _Fit
) -> None:
    now = native_stop
    late = _fit(tiny_dataset("detect"), "stop", replay=UPDATE_REPLAY, checkpoints=tmp_path)
    assert late.error is not None
    assert now.error is not None
    assert str(late.error) == str(now.error)
    # the poisoned step's update was replayed, with its backup inside the recording
    assert late.module.update_step is not None
    assert late.module.update_step.telemetry.replays == POISONED - 1
    assert first_difference(now.digest, late.digest) is None
    assert now.checkpoints is not None
    assert _checkpoint_digests(tmp_path) == _checkpoint_digests(now.checkpoints)


def test_fit_late_skip_of_several_steps_under_accumulation_equals_the_check_before(
    tiny_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[bool] = []
    observe = NonFiniteLossGuard.observe

    def spy(guard: NonFiniteLossGuard, total: Any, terms: Any, *, send: bool = False) -> None:
        sent.append(send)
        observe(guard, total, terms, send=send)

    monkeypatch.setattr(NonFiniteLossGuard, "observe", spy)
    yaml = tiny_dataset("detect")
    options: dict[str, Any] = {"accumulate": 2, "max_steps": 4, "poisoned": (2, 3)}
    now = _fit(yaml, "skip", **options)
    sent_now, sent[:] = list(sent), []
    late = _fit(yaml, "skip", replay=UPDATE_REPLAY, **options)
    # checked late, every micro-batch's flags leave at its loss (not behind its backward)
    assert (sent_now, sent) == ([False] * 8, [True] * 8)
    assert late.module.loss_guard.skipped == now.module.loss_guard.skipped == 2
    assert int(late.module.ema.updates) == int(now.module.ema.updates) == 2
    assert first_difference(now.digest, late.digest) is None


class _FailAfterStep(Callback):
    """Raises at the end of step :data:`POISONED`, while its verdict is pending."""

    def __init__(self) -> None:
        self.fit: tuple[YoloModule, pl.Trainer] | None = None

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, *_: Any
    ) -> None:
        if trainer.global_step == POISONED:
            assert isinstance(pl_module, YoloModule)
            self.fit = pl_module, trainer
            raise RuntimeError("a callback failed")


def test_fit_late_check_undoes_a_pending_non_finite_update_on_an_exception(
    tiny_dataset: Any, native_stop: _Fit
) -> None:
    failing = _FailAfterStep()
    with pytest.raises(RuntimeError, match="a callback failed"):
        _fit(tiny_dataset("detect"), "stop", replay=UPDATE_REPLAY, extra=[failing])
    assert failing.fit is not None
    module, trainer = failing.fit
    assert not module.loss_guard.pending
    assert first_difference(native_stop.digest, _digest(module, trainer)) is None


@pytest.mark.parametrize("policy", ["stop", "skip"])
def test_fit_late_check_of_an_epochs_last_step_comes_before_validation_and_checkpoint(
    tiny_dataset: Any, tmp_path: Path, policy: str
) -> None:
    yaml = tiny_dataset("detect")
    # 8 images at batch 4: step 2 ends epoch 0, which validates, then checkpoints
    options: dict[str, Any] = {
        "max_steps": -1,
        "max_epochs": 2,
        "poisoned": (2,),
        "validate": True,
        "every_step": False,
    }
    now = _fit(yaml, policy, checkpoints=tmp_path / "now", **options)
    late = _fit(yaml, policy, replay=UPDATE_REPLAY, checkpoints=tmp_path / "late", **options)
    assert (late.error is None) == (now.error is None) == (policy == "skip")
    assert first_difference(now.digest, late.digest) is None
    assert _checkpoint_digests(tmp_path / "late") == _checkpoint_digests(tmp_path / "now")
    expected = ["epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt"] if policy == "skip" else []
    assert list(_checkpoint_digests(tmp_path / "late")) == expected


@pytest.mark.usefixtures("deterministic")
@pytest.mark.parametrize(
    ("precision", "policy"),
    [
        pytest.param("16-mixed", "stop", marks=GPU),
        pytest.param("bf16-mixed", "skip", marks=GPU),
        pytest.param("bf16-mixed", "stop", marks=GPU),
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
    assert (native.error is None) == (replayed.error is None)
    assert first_difference(native.digest, replayed.digest) is None
    # a late stop also ends the poisoned batch (its loss is NaN) before it raises
    losses = [str(v) for v in native.states.losses]
    assert [str(v) for v in replayed.states.losses[: len(losses)]] == losses
    assert int(native.module.ema.updates) == int(replayed.module.ema.updates) < 6
    assert replayed.module.replay_telemetry.as_dict()["retirements"] == 0
    scalers = [getattr(f.trainer.precision_plugin, "scaler", None) for f in (native, replayed)]
    if precision == "16-mixed":
        # fp16: GradScaler skipped the NaN step and backed off, exactly as natively
        assert scalers[0] is not None
        assert scalers[1] is not None
        assert scalers[0].state_dict() == scalers[1].state_dict()
