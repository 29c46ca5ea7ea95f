"""Fine-tuning from pretrained weights (``YoloModule(weights=...)``, ``--model.weights``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

from lucid_yolo.models import WeightsError, create_model, save_reference_weights
from lucid_yolo.replay import first_difference
from lucid_yolo.train import ReplayConfig, YoloDataModule, YoloModule


def _pretrained(tmp_path: Path, num_classes: int, name: str = "yolo26n") -> Path:
    """A yolo26n under the reference's names, as an Ultralytics user would bring it."""
    return save_reference_weights(
        create_model(name, num_classes=num_classes, seed=7), tmp_path / "pretrained.pt"
    )


def _trainer(tmp_path: Path, **kwargs: Any) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        num_sanity_val_steps=0,
        **kwargs,
    )


def test_module_starts_from_the_weights(tmp_path: Path) -> None:
    module = YoloModule("yolo26n", num_classes=3, weights=str(_pretrained(tmp_path, 3)))
    expected = create_model("yolo26n", num_classes=3, seed=7).state_dict()
    for name, value in module.net.state_dict().items():
        assert torch.equal(value, expected[name]), name
    for name, value in module.ema_net.state_dict().items():
        assert torch.equal(value, expected[name]), name


def test_module_refuses_weights_of_another_task(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match="holds a yolo26n but the model is yolo26n-obb"):
        YoloModule("yolo26n-obb", num_classes=3, weights=str(_pretrained(tmp_path, 3)))


def test_module_fine_tunes_and_checkpoint_round_trips(
    tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    data = YoloDataModule(
        tiny_dataset("detect"), task="detect", imgsz=64, batch_size=4, workers=0, max_instances=48
    )
    weights = _pretrained(tmp_path, num_classes=80)  # COCO's count: the class branches start fresh
    module = YoloModule(
        "yolo26n", num_classes=data.num_classes, weights=str(weights), warmup_epochs=0.0
    )
    start = {k: v.clone() for k, v in module.net.state_dict().items()}
    trainer = _trainer(tmp_path, max_steps=2, limit_val_batches=0)
    trainer.fit(module, data)
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
    moved = [k for k, v in module.net.state_dict().items() if not torch.equal(v, start[k])]
    assert any(k.startswith("backbone.") for k in moved)
    path = tmp_path / "fine-tuned.ckpt"
    trainer.save_checkpoint(path)
    restored = YoloModule.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    restored_ema = restored.ema_net.state_dict()
    for name, value in module.ema_net.state_dict().items():
        assert torch.equal(value, restored_ema[name]), name


@pytest.mark.gpu
# The fits load in the main process on purpose (same batches for both); Lightning suggests more
# workers on a many-core GPU host.
@pytest.mark.filterwarnings("ignore:The 'train_dataloader' does not have many workers:UserWarning")
def test_replayed_fine_tune_is_bitwise_native(
    tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any], tmp_path: Path
) -> None:
    yaml = tiny_dataset("detect")
    weights = str(_pretrained(tmp_path, num_classes=80))
    native = fit_digests(yaml, "detect", "32-true", 1, weights=weights)
    replayed = fit_digests(
        yaml,
        "detect",
        "32-true",
        1,
        weights=weights,
        replay=ReplayConfig(network=True, loss=True, update=True),
    )
    # Every region records on its first call and replays on every later one.
    micro_batches = len(replayed.losses)
    assert {name: region["replays"] for name, region in replayed.regions.items()} == {
        "network+loss": micro_batches - 1,
        "optimizer MuSGD": replayed.ema_updates - 1,
    }, replayed.regions
    assert replayed.telemetry["retirements"] == 0, replayed.telemetry
    assert {key.split(".")[0] for key in replayed.digests} == {
        "model",
        "ema",
        "optimizer",
        "scheduler",
    }
    assert first_difference(native.digests, replayed.digests) is None
    assert replayed.losses == native.losses
