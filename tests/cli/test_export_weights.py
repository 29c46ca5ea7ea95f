"""``lucid-yolo export`` from pretrained weights and to Ultralytics' names."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lucid_yolo.cli.main import main
from lucid_yolo.models import create_model, read_weights, save_reference_weights


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
    with pytest.raises(SystemExit):
        main(["export", "--format", "onnx"])
    assert "one of the arguments --checkpoint --model.weights is required" in (
        capsys.readouterr().err
    )
