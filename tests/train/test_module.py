"""YoloModule under a real Lightning Trainer on the CPU: learning, accumulation, checkpoints."""

from __future__ import annotations

import contextlib
import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest.mock import patch

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger

import lucid_yolo.models.weight_casts as weight_casts
from lucid_yolo.models import YOLO26, ConvBnAct
from lucid_yolo.models.registry import TASK_SUFFIXES
from lucid_yolo.replay import (
    PoolLeakError,
    ReplayRetiredWarning,
    RetireReason,
    ScratchLoan,
    Telemetry,
    first_difference,
)
from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule
from lucid_yolo.train.data.augment.config import AugmentConfig
from lucid_yolo.train.data.resumable_loader import ResumableLoader
from lucid_yolo.train.exceptions import TrainConfigError


class _LossLog(Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *_: Any) -> None:
        self.losses.append(float(outputs["loss"]))


def _data(yaml: Path, task: str, **kwargs: Any) -> YoloDataModule:
    options: dict[str, Any] = {
        "task": task,
        "imgsz": 64,
        "batch_size": 4,
        "workers": 0,
        "max_instances": 48,
    }
    options.update(kwargs)
    return YoloDataModule(yaml, **options)


def _module(data: YoloDataModule, task: str, **kwargs: Any) -> YoloModule:
    shape = data.spec.kpt_shape
    return YoloModule(
        f"yolo26n{TASK_SUFFIXES[task]}",
        num_classes=data.num_classes,
        kpt_shape=(17, 3) if shape is None else (shape[0], 3),
        **kwargs,
    )


def _trainer(tmp_path: Path, **kwargs: Any) -> pl.Trainer:
    options: dict[str, Any] = {
        "accelerator": "cpu",
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": tmp_path,
        "num_sanity_val_steps": 0,
    }
    options.update(kwargs)
    return pl.Trainer(**options)


def test_module_replays_the_metric_scoring_and_matching_with_the_evaluation_forward() -> None:
    on = YoloModule("yolo26n", num_classes=2, replay=ReplayConfig(evaluation=True))
    off = YoloModule("yolo26n", num_classes=2, replay=ReplayConfig(network=True, update=True))
    assert on.evaluator.replay_scoring
    assert on.evaluator.metric.replay_matching
    assert not off.evaluator.replay_scoring
    assert not off.evaluator.metric.replay_matching


@pytest.mark.slow
def test_module_fit_reduces_loss(tiny_dataset: Callable[[str], Path], tmp_path: Path) -> None:
    data = _data(tiny_dataset("detect"), "detect", augment=AugmentConfig.off())
    module = _module(data, "detect", warmup_epochs=0.0, lr0=0.01)
    log = _LossLog()
    trainer = _trainer(
        tmp_path,
        max_steps=40,
        limit_train_batches=1,
        limit_val_batches=0,
        enable_checkpointing=False,
        callbacks=[log],
    )
    trainer.fit(module, data)
    assert len(log.losses) == 40
    # the default gradient clip (norm 10) slows these first steps
    assert sum(log.losses[-4:]) < 0.9 * sum(log.losses[:4]), log.losses


class _TrainStreamsAtSanityCheckEnd(Callback):
    def __init__(self) -> None:
        self.streams: list[int] = []

    def on_sanity_check_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loader = trainer.train_dataloader
        self.streams.append(loader.streams if isinstance(loader, ResumableLoader) else 0)


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_module_fit_starts_the_training_workers_before_the_sanity_check_ends(
    tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    # the learning-rate schedule reads estimated_stepping_batches in configure_optimizers, so
    # Lightning asks for the training loader (and the data module starts it) before the summary
    data = _data(tiny_dataset("detect"), "detect", batch_size=2, workers=2)
    module = _module(data, "detect")
    at_end = _TrainStreamsAtSanityCheckEnd()
    trainer = _trainer(
        tmp_path,
        max_epochs=1,
        limit_train_batches=1,
        limit_val_batches=1,
        num_sanity_val_steps=1,
        enable_checkpointing=False,
        callbacks=[at_end],
    )
    trainer.fit(module, data)
    assert at_end.streams == [1]


def test_module_ema_updates_once_per_optimizer_step(
    tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    data = _data(tiny_dataset("detect"), "detect", batch_size=2)
    module = _module(data, "detect")
    trainer = _trainer(
        tmp_path,
        max_steps=2,
        accumulate_grad_batches=2,
        limit_val_batches=0,
        enable_checkpointing=False,
    )
    trainer.fit(module, data)
    assert trainer.global_step == 2
    assert int(module.ema.updates) == 2


def test_module_logs_losses_on_logging_steps_and_epoch_ends_only(
    tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    data = _data(tiny_dataset("detect"), "detect", batch_size=2, augment=AugmentConfig.off())
    module = _module(data, "detect")
    logged_at: list[int] = []  # 1-based optimizer step of each train/loss log
    log = module.log

    def recording_log(name: str, value: Any, **kwargs: Any) -> None:
        if name == "train/loss":
            logged_at.append(module.global_step + 1)
        log(name, value, **kwargs)

    module.log = recording_log  # type: ignore[method-assign]
    logger = CSVLogger(tmp_path, name="", version="fit")
    trainer = _trainer(
        tmp_path,
        max_epochs=1,
        limit_train_batches=3,
        limit_val_batches=0,
        log_every_n_steps=2,
        logger=logger,
        enable_checkpointing=False,
    )
    trainer.fit(module, data)
    # every second step (what the logger writes) and the epoch's last step
    assert logged_at == [2, 3]
    with (Path(logger.log_dir) / "metrics.csv").open() as metrics:
        rows = list(csv.DictReader(metrics))
    written = [int(row["step"]) + 1 for row in rows if row.get("train/loss")]
    assert written == [2]


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_module_validates_every_task(
    task: str, tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    data = _data(tiny_dataset(task), task)
    module = _module(data, task)
    (result,) = _trainer(tmp_path).validate(module, data)
    assert 0.0 <= result["val/fitness"] <= 1.0
    kind = {"detect": "box", "segment": "mask", "pose": "pose", "obb": "obb"}[task]
    assert result["val/fitness"] == result[f"val/{kind}/mAP50-95"]


@pytest.mark.parametrize("task", ["detect", "segment"])
def test_module_validation_metrics_do_not_depend_on_the_validation_batch_size(
    task: str, tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    results = []
    for val_batch_size in (1, 3):  # 3: the 4 images in unequal batches
        data = _data(tiny_dataset(task), task, imgsz=128, val_batch_size=val_batch_size)
        (result,) = _trainer(tmp_path).validate(_module(data, task), data, verbose=False)
        results.append(result)
    assert results[0]["val/box/R"] > 0.0, "a test of nothing: no prediction matched"
    assert results[1] == results[0]


def test_module_checkpoint_holds_ema_optimizer_and_metadata(
    tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    data = _data(tiny_dataset("detect"), "detect")
    module = _module(data, "detect")
    trainer = _trainer(tmp_path, max_steps=1, limit_val_batches=1)
    trainer.fit(module, data)
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=True, map_location="cpu")
    assert checkpoint["class_names"] == list(data.names)
    assert checkpoint["task"] == "detect"
    assert int(checkpoint["ema_updates"]) == 1
    assert any(key.startswith("ema_net.") for key in checkpoint["state_dict"])
    assert checkpoint["optimizer_states"]
    assert checkpoint["lr_schedulers"]
    restored = YoloModule.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    assert restored.names == data.names
    assert int(restored.ema.updates) == 1
    restored_ema = restored.ema_net.state_dict()
    for name, value in module.ema_net.state_dict().items():
        assert torch.equal(value, restored_ema[name]), name


def test_module_rejects_bad_hyperparameters() -> None:
    with pytest.raises(ValueError, match="lr0 must be > 0"):
        YoloModule("yolo26n", lr0=0.0)


def test_module_rejects_confidence_outside_unit_interval() -> None:
    with pytest.raises(ValueError, match=r"val_conf must be in \[0, 1\], got 1.5"):
        YoloModule("yolo26n", val_conf=1.5)


def test_module_predict_step_runs_the_ema_network(
    tiny_dataset: Callable[[str], Path],
) -> None:
    yaml = tiny_dataset("detect")
    data = YoloDataModule(yaml, source=yaml.parent / "images" / "val", imgsz=64, workers=0)
    module = YoloModule("yolo26n", num_classes=data.num_classes, val_conf=0.0, max_det=5).eval()
    with torch.no_grad():
        for parameter in module.net.parameters():
            parameter.mul_(0.5)  # the training network drifts away from the EMA copy
    batch = next(iter(data.predict_dataloader()))
    with torch.no_grad():
        found = module.predict_step(batch, 0)
        images = batch["images"].float() / 255.0
        from_ema = module.evaluator.predictions(module.ema_net(images), batch)
        from_net = module.evaluator.predictions(module.net(images), batch)
    assert len(found) == 4
    for got, ema, net in zip(found, from_ema, from_net, strict=True):
        assert torch.equal(got["scores"], ema["scores"])
        assert torch.equal(got["boxes"], ema["boxes"])
        assert not torch.equal(got["scores"], net["scores"])


def test_module_ema_is_the_trainer_ema_blended_by_the_update_step() -> None:
    module = YoloModule("yolo26n", num_classes=2)
    ema = module.ema
    assert (ema.decay_on, ema.buffers, ema.recorder.enabled) == ("device", "copy", False)
    assert ema.live is module.net
    assert module.ema_net is ema.module


def _two_process_trainer(tmp_path: Path, **kwargs: Any) -> pl.Trainer:
    """A two-process DDP trainer on the CPU, not launched: its world size is all the module
    reads in ``setup``."""
    return _trainer(tmp_path, devices=2, strategy="ddp", **kwargs)


def test_module_data_parallel_fit_refuses_verify_every(tmp_path: Path) -> None:
    module = YoloModule("yolo26n", num_classes=2, replay=ReplayConfig(verify_every=2))
    module.trainer = _two_process_trainer(tmp_path)
    with pytest.raises(TrainConfigError, match=r"replay\.verify_every=2 is not supported on 2"):
        module.setup("fit")


def test_module_data_parallel_fit_takes_replayed_regions(tmp_path: Path) -> None:
    config = ReplayConfig(network=True, loss=True, update=True)
    module = YoloModule("yolo26n", num_classes=2, replay=config)
    module.trainer = _two_process_trainer(tmp_path)
    module.setup("fit")
    assert module.replay.config == config


def test_module_fit_in_one_process_writes_gradients_directly(tmp_path: Path) -> None:
    module = YoloModule("yolo26n", num_classes=2, replay=ReplayConfig(network=True))
    module.trainer = _trainer(tmp_path)
    module.setup("fit")
    assert module.replay.direct_gradients
    module.replay.shared_pool(torch.device("cpu"))
    assert module.replay.network is not None
    assert module.replay.network.direct_gradients


@pytest.mark.parametrize(
    ("replay", "replays_pixels"), [(ReplayConfig(update=True), True), (ReplayConfig(), False)]
)
def test_module_fit_replays_the_pixel_work_as_it_replays(
    tiny_dataset: Callable[[str], Path], tmp_path: Path, replay: ReplayConfig, replays_pixels: bool
) -> None:
    data = _data(tiny_dataset("detect"), "detect")
    module = _module(data, "detect", replay=replay)
    _trainer(tmp_path, max_steps=1, limit_val_batches=0).fit(module, datamodule=data)
    assert data.pixels_replayed is replays_pixels


@pytest.mark.parametrize("pixels_replayed", [True, False])
def test_module_logs_replay_counters_when_only_the_pixel_work_replays(
    tiny_dataset: Callable[[str], Path], tmp_path: Path, pixels_replayed: bool
) -> None:
    augment = AugmentConfig(pixels_replayed=pixels_replayed)
    data = _data(tiny_dataset("detect"), "detect", augment=augment)
    module = _module(data, "detect")  # no graphs of its own
    trainer = _trainer(tmp_path, max_epochs=1, limit_train_batches=1, limit_val_batches=1)
    trainer.fit(module, datamodule=data)
    assert ("replay/replays" in trainer.callback_metrics) is pixels_replayed


def test_module_replay_counters_hold_the_pixel_work(
    tiny_dataset: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _data(tiny_dataset("detect"), "detect")
    module = _module(data, "detect")
    _trainer(tmp_path, max_steps=1, limit_val_batches=0).fit(module, datamodule=data)
    assert module.replay_telemetry.replays == 0  # nothing replays in a CPU fit
    pixels = Telemetry(recordings=1, replays=7)
    monkeypatch.setattr(YoloDataModule, "pixel_replay_telemetry", property(lambda self: pixels))
    assert (module.replay_telemetry.recordings, module.replay_telemetry.replays) == (1, 7)


def test_module_data_parallel_fit_hands_gradients_to_autograd(tmp_path: Path) -> None:
    # DDP all-reduces through hooks on the parameters' gradient accumulators
    module = YoloModule("yolo26n", num_classes=2, replay=ReplayConfig(network=True))
    module.replay.direct_gradients = True
    module.trainer = _two_process_trainer(tmp_path)
    module.setup("fit")
    assert not module.replay.direct_gradients


def test_module_data_parallel_fit_takes_update_replay(tmp_path: Path) -> None:
    module = YoloModule("yolo26n", num_classes=2, replay=ReplayConfig(update=True))
    module.trainer = _two_process_trainer(tmp_path, accumulate_grad_batches=2)
    module.setup("fit")
    assert module.replay.config.update


def test_module_sync_batchnorm_retires_the_network_region() -> None:
    module = YoloModule("yolo26n", num_classes=2, replay=ReplayConfig(network=True))
    # what Lightning's sync_batchnorm does before the recorders are built
    torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)
    module.replay(torch.rand(1, 3, 64, 64))  # warm-up, native
    with pytest.warns(ReplayRetiredWarning, match="unsupported-module.*SyncBatchNorm"):
        module.replay(torch.rand(1, 3, 64, 64))
    (network,) = module.replay.recorders()
    assert network.retired is not None
    assert network.retired.reason is RetireReason.UNSUPPORTED_MODULE


def test_module_clips_gradients_at_norm_10_by_default() -> None:
    assert YoloModule("yolo26n", num_classes=2).hparams["grad_clip_norm"] == 10.0


def test_module_rejects_a_negative_gradient_clip() -> None:
    with pytest.raises(TrainConfigError, match=r"grad_clip_norm must be >= 0 .*got -1\.0"):
        YoloModule("yolo26n", num_classes=2, grad_clip_norm=-1.0)


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_module_clips_gradients_to_grad_clip_norm(
    tiny_dataset: Callable[[str], Path],
    fit_digests: Callable[..., Any],
    shared_fit: Callable[..., Any],
) -> None:
    yaml = tiny_dataset("detect")
    cpu = {"accelerator": "cpu", "imgsz": 64, "max_steps": 2}
    own = fit_digests(yaml, "detect", "32-true", 1, grad_clip_norm=10.0, **cpu)
    unclipped = shared_fit(yaml, "detect", "32-true", 1, grad_clip_norm=0.0, **cpu)
    lightning = fit_digests(
        yaml, "detect", "32-true", 1, grad_clip_norm=0.0, gradient_clip_val=10.0, **cpu
    )
    assert own.digests == lightning.digests
    assert own.digests != unclipped.digests


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_module_gradient_clip_of_the_trainer_takes_precedence(
    tiny_dataset: Callable[[str], Path],
    fit_digests: Callable[..., Any],
    shared_fit: Callable[..., Any],
) -> None:
    yaml = tiny_dataset("detect")
    cpu = {"accelerator": "cpu", "imgsz": 64, "max_steps": 2}
    never = fit_digests(yaml, "detect", "32-true", 1, gradient_clip_val=1e12, **cpu)
    unclipped = shared_fit(yaml, "detect", "32-true", 1, grad_clip_norm=0.0, **cpu)
    assert never.digests == unclipped.digests


def test_module_rejects_an_unknown_newton_schulz_dtype() -> None:
    with pytest.raises(
        TrainConfigError,
        match=(
            r"newton_schulz_dtype must be one of \['auto', 'bfloat16', 'float32'\], "
            r"got 'float16'"
        ),
    ):
        YoloModule("yolo26n", num_classes=2, newton_schulz_dtype="float16")  # type: ignore[arg-type]


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_newton_schulz_in_bfloat16_is_its_own_fit_and_replays_bitwise(
    tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    # MuSGD orthogonalises in the dtype the module names: the CPU default (float32) and a
    # bfloat16 fit differ, and the bfloat16 fit's replayed update (the CPU stand-in) equals
    # its native one.
    yaml = tiny_dataset("detect")
    # two steps: bfloat16 matrix products are slow on a CPU (some 4 s a yolo26n update)
    cpu = {"accelerator": "cpu", "imgsz": 64, "max_steps": 2}
    float32 = fit_digests(yaml, "detect", "32-true", 1, **cpu)
    native = fit_digests(yaml, "detect", "32-true", 1, newton_schulz_dtype="bfloat16", **cpu)
    replay = ReplayConfig(network=True, loss=True, update=True)
    replayed = fit_digests(
        yaml, "detect", "32-true", 1, newton_schulz_dtype="bfloat16", replay=replay, **cpu
    )
    # the default names no dtype: MuSGD chooses by device (float32 on the CPU, test_musgd)
    assert float32.module.hparams["newton_schulz_dtype"] == "auto"
    assert float32.module.trainer.optimizers[0].ns_dtype is None
    assert native.module.hparams["newton_schulz_dtype"] == "bfloat16"
    assert replayed.module.trainer.optimizers[0].ns_dtype is torch.bfloat16
    assert float32.digests != native.digests
    assert replayed.regions["optimizer MuSGD"]["replays"] == 1
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses


def test_module_memory_format_defaults_to_auto_outside_the_hyperparameters() -> None:
    module = YoloModule("yolo26n", num_classes=2)
    assert module.memory_format_choice == "auto"
    assert "memory_format" not in module.hparams
    # resolved for the trainer's device in setup; until then the network stays NCHW
    assert module.memory_format == torch.contiguous_format


def test_module_rejects_an_unknown_memory_format() -> None:
    with pytest.raises(TrainConfigError, match=r"memory_format='NHWC' is not a layout; use one"):
        YoloModule("yolo26n", num_classes=2, memory_format="NHWC")  # type: ignore[arg-type]


def _in_layout(tensor: torch.Tensor, layout: torch.memory_format) -> bool:
    return tensor.is_contiguous(memory_format=layout)


def _weights_in_layout(module: YoloModule, layout: torch.memory_format) -> bool:
    """Every 4-D tensor of the network and the EMA network in ``layout``."""
    tensors = [*module.net.state_dict().values(), *module.ema_net.state_dict().values()]
    return all(_in_layout(t, layout) for t in tensors if t.dim() == 4)


@pytest.mark.parametrize(
    ("choice", "layout"),
    [("channels_last", torch.channels_last), ("auto", torch.contiguous_format)],
)
def test_module_fit_lays_out_networks_and_images_as_memory_format_says(
    choice: str, layout: torch.memory_format, tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    data = _data(tiny_dataset("detect"), "detect")
    module = _module(data, "detect", memory_format=choice)
    seen: dict[str, list[bool]] = {"train": [], "val": []}
    for stage, net in (("train", module.net), ("val", module.ema_net)):
        net.register_forward_pre_hook(
            lambda _, args, stage=stage: seen[stage].append(_in_layout(args[0], layout))
        )
    trainer = _trainer(
        tmp_path,
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        enable_checkpointing=False,
    )
    trainer.fit(module, data)
    assert module.memory_format == layout
    assert seen == {"train": [True, True], "val": [True]}
    assert _weights_in_layout(module, layout)


@pytest.mark.parametrize("task", ["segment", "pose", "obb"])
def test_module_trains_and_validates_every_task_in_channels_last(
    task: str, tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    # what every task runs on CUDA by default: the heads' outputs (segment's prototypes) come
    # out channels-last into the loss and the evaluator
    data = _data(tiny_dataset(task), task)
    module = _module(data, task, memory_format="channels_last")
    trainer = _trainer(
        tmp_path,
        max_epochs=1,
        limit_train_batches=1,
        limit_val_batches=1,
        enable_checkpointing=False,
    )
    trainer.fit(module, data)
    assert trainer.global_step == 1
    assert _weights_in_layout(module, torch.channels_last)
    assert 0.0 <= float(trainer.callback_metrics["val/fitness"]) <= 1.0


@pytest.mark.parametrize(
    ("written", "loaded"), [("channels_last", "contiguous"), ("contiguous", "channels_last")]
)
def test_module_checkpoint_written_in_one_layout_loads_into_the_other(
    written: str, loaded: str, tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    data = _data(tiny_dataset("detect"), "detect")
    module = _module(data, "detect", memory_format=written)
    trainer = _trainer(tmp_path, max_steps=1, limit_val_batches=0, enable_checkpointing=False)
    trainer.fit(module, data)
    path = tmp_path / f"{written}.ckpt"
    trainer.save_checkpoint(path)
    restored = _module(data, "detect", memory_format=loaded)
    (result,) = _trainer(tmp_path, limit_val_batches=1).validate(restored, data, ckpt_path=path)
    assert "val/fitness" in result
    layout = {"channels_last": torch.channels_last, "contiguous": torch.contiguous_format}[loaded]
    assert _weights_in_layout(restored, layout)
    saved = module.state_dict()
    for name, value in restored.state_dict().items():
        assert torch.equal(value, saved[name]), name
    # outside a trainer (export, the CLI's checkpoint loading) the module stays as built: NCHW
    exported = YoloModule.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    assert _weights_in_layout(exported, torch.contiguous_format)
    trained_ema = module.ema_net.state_dict()
    for name, value in exported.ema_net.state_dict().items():
        assert torch.equal(value, trained_ema[name]), name


def test_evaluation_loan_leak_names_the_option_that_turns_the_loan_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = YoloModule("yolo26n", num_classes=3, replay=ReplayConfig(network=True))
    module.replay.shared_pool(torch.device("cpu"))

    def leaked(self: ScratchLoan) -> None:
        raise PoolLeakError("1 block(s) allocated during work lent the pool's free blocks")

    monkeypatch.setattr(ScratchLoan, "close", leaked)
    with pytest.raises(PoolLeakError, match=r"--model\.replay\.evaluate_in_pool false") as caught:
        module.replay.end_evaluation()
    assert isinstance(caught.value.__cause__, PoolLeakError)


def _first_convolution_inputs(module: YoloModule) -> list[tuple[str, torch.dtype]]:
    """Record the dtype each network's first convolution is handed, per call."""
    seen: list[tuple[str, torch.dtype]] = []
    for name, net in (("net", module.net), ("ema", module.ema_net)):
        assert isinstance(net, YOLO26)
        stem = net.backbone.stem[0]
        assert isinstance(stem, ConvBnAct)
        stem.conv.register_forward_pre_hook(
            lambda _conv, args, name=name: seen.append((name, args[0].dtype))
        )
    return seen


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_module_bf16_mixed_hands_bf16_images_with_the_bits_of_float32_images(
    tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    """Under bf16-mixed the training step, validation and prediction make their images in
    bf16 (``network_input_dtype``); the fit's state, metrics and predictions are those of the
    same fit fed float32 images that autocast casts down."""

    def run(images_dtype: Callable[[torch.device], torch.dtype] | None) -> dict[str, Any]:
        pl.seed_everything(0, verbose=False)
        data = _data(tiny_dataset("detect"), "detect", batch_size=2)
        module = _module(data, "detect", memory_format="channels_last")
        seen = _first_convolution_inputs(module)
        trainer = _trainer(
            tmp_path,
            precision="bf16-mixed",
            max_steps=2,
            limit_val_batches=1,
            enable_checkpointing=False,
        )
        with contextlib.ExitStack() as stack:
            if images_dtype is not None:
                # the training step's images, and the evaluation region's (validation, predict)
                for user in ("lucid_yolo.train.module", "lucid_yolo.train.replay.regions"):
                    stack.enter_context(patch(f"{user}.network_input_dtype", images_dtype))
            trainer.fit(module, data)
            predictions = trainer.predict(module, datamodule=data)
        return {
            "seen": set(seen),
            "state": module.state_dict(),
            "metrics": dict(trainer.callback_metrics),
            "predictions": predictions,
        }

    made_in_bf16 = run(None)
    cast_by_autocast = run(lambda _device: torch.float32)
    assert made_in_bf16["seen"] == {("net", torch.bfloat16), ("ema", torch.bfloat16)}
    assert cast_by_autocast["seen"] == {("net", torch.float32), ("ema", torch.float32)}
    for key, value in cast_by_autocast["state"].items():
        assert torch.equal(made_in_bf16["state"][key], value), key
    assert made_in_bf16["metrics"].keys() == cast_by_autocast["metrics"].keys()
    for key, value in cast_by_autocast["metrics"].items():
        assert torch.equal(made_in_bf16["metrics"][key], value), key
    made = [image for batch in made_in_bf16["predictions"] for image in batch]
    cast = [image for batch in cast_by_autocast["predictions"] for image in batch]
    assert made
    assert len(made) == len(cast)
    for ours, theirs in zip(made, cast, strict=True):
        assert ours.keys() == theirs.keys()
        for key, value in theirs.items():
            assert (ours[key] is None and value is None) or torch.equal(ours[key], value), key


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_module_casts_weights_together_by_default_with_the_bits_of_autocasts_casts(
    tiny_dataset: Callable[[str], Path],
    fit_digests: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    yaml = tiny_dataset("detect")
    options: dict[str, Any] = {"accelerator": "cpu", "max_steps": 2, "validate": True}
    copies: list[int] = []
    converted = weight_casts._converted

    def counted(tensors: Any, dtypes: Any) -> Any:
        copies.append(len(tensors))
        return converted(tensors, dtypes)

    monkeypatch.setattr(weight_casts, "_converted", counted)
    together = fit_digests(yaml, "detect", "bf16-mixed", 2, **options)
    # a training forward: one copy for backbone and neck, one for the head; its backward: one
    # a block (12); validation, without grad, leaves its casts to autocast
    assert len(copies) == 14 * len(together.losses) > 0
    copies.clear()
    autocast = fit_digests(yaml, "detect", "bf16-mixed", 2, casts_weights_together=False, **options)
    assert copies == []
    assert together.module.net.casts_weights_together
    assert together.module.ema_net.casts_weights_together
    assert not autocast.module.net.casts_weights_together
    assert "casts_weights_together" not in together.module.hparams
    assert together.digests == autocast.digests
    assert together.losses == autocast.losses
    assert together.val == autocast.val
    assert together.val_outputs == autocast.val_outputs
