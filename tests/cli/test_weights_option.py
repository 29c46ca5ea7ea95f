"""``--model.weights``: predict and export from pretrained weights, export to Ultralytics' names."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
import yaml

from lucid_yolo.cli.main import main
from lucid_yolo.models import create_model, read_weights, save_reference_weights
from lucid_yolo.train.data.synthetic import generate_synthetic

if TYPE_CHECKING:
    from conftest import CliRunner

# Lightning's advice for an in-process predict on a small CPU machine, and its own pytree call
IN_PROCESS_WARNINGS = (
    "ignore:The '.*dataloader' does not have many workers:UserWarning",
    "ignore:`isinstance.treespec, LeafSpec.` is deprecated:FutureWarning",
)


@pytest.mark.filterwarnings(IN_PROCESS_WARNINGS[0])
@pytest.mark.filterwarnings(IN_PROCESS_WARNINGS[1])
def test_predict_from_pretrained_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    data = generate_synthetic(tmp_path / "tiny", task="detect", num_train=2, num_val=2, imgsz=64)
    num_classes = len(yaml.safe_load(data.read_text())["names"])
    weights = save_reference_weights(
        create_model("yolo26n", num_classes=num_classes, seed=1), tmp_path / "yolo26n.pt"
    )
    images = data.parent / "images" / "val"
    argv = ["predict", "--model.weights", str(weights), "--data.yaml", str(data)]
    argv += ["--data.source", str(images), "--data.workers", "0"]
    argv += ["--trainer.enable_progress_bar", "false", "--model.val_conf", "0"]
    assert main([*argv, "--model.max_det", "3"]) == 0
    out = capsys.readouterr().out
    assert "predicted 2 image(s), 6 detection(s)" in out
    assert re.search(rf"^loaded \d+ tensors from .*{re.escape(weights.name)}", out, re.M), out
    record = json.loads(next((tmp_path / "runs/detect/predict1").glob("*.json")).read_text())
    assert len(record["detections"]) == 3


def test_predict_from_weights_needs_the_dataset_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    weights = save_reference_weights(create_model("yolo26n"), tmp_path / "yolo26n.pt")
    argv = ["predict", "--model.weights", str(weights), "--data.source", str(tmp_path)]
    assert main(argv) == 2
    assert "predict with --model.weights needs --data.yaml" in capsys.readouterr().err


@pytest.mark.slow
def test_fit_from_weights_of_another_class_count_says_what_it_kept(
    tmp_path: Path, tiny_data: Path, tiny_fit: tuple[str, ...], cli: CliRunner
) -> None:
    weights = save_reference_weights(create_model("yolo26n"), tmp_path / "yolo26n.pt")
    done = cli("fit", "--model.weights", str(weights), "--data.yaml", str(tiny_data), *tiny_fit)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        f"loaded 606 tensors from {weights}; the file has 80 classes and the model 5: "
        "kept every tensor but the 102 class-count-dependent ones of the class branches, which "
        "start fresh"
    ) in done.stdout.splitlines()


@pytest.mark.parametrize("fmt", ["ultralytics", "safetensors"])
def test_export_pretrained_weights_under_reference_names(
    tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    model = create_model("yolo26n-obb", num_classes=2, seed=3)
    source = save_reference_weights(model, tmp_path / "source.pt")
    argv = ["export", "--model.weights", str(source), "--format", fmt]
    assert main(argv) == 0
    out = tmp_path / ("source.ultralytics.pt" if fmt == "ultralytics" else "source.safetensors")
    assert f"to {out}" in capsys.readouterr().out
    exported = read_weights(out)
    assert exported.model_name == "yolo26n-obb"
    for key, tensor in model.state_dict().items():
        assert torch.equal(exported.tensors[key], tensor), key


def test_export_refuses_unsafe_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "evil.pt"
    torch.save({"model": print}, source)
    assert main(["export", "--model.weights", str(source), "--format", "ultralytics"]) == 2
    assert "refusing to unpickle" in capsys.readouterr().err


def test_export_needs_a_checkpoint_or_weights(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--format", "onnx"]) == 2
    assert "export needs exactly one of --ckpt_path" in capsys.readouterr().err
