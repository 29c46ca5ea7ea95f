"""``lucid-yolo export``: ONNX of a checkpoint's end-to-end network."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import onnx
import pytest

from lucid_yolo.cli.main import main

if TYPE_CHECKING:
    from conftest import Exported, Trained


def test_export_onnx_of_trained_checkpoint_loads(exported: Exported) -> None:
    assert exported.code == 0
    model = onnx.load(str(exported.path))
    onnx.checker.check_model(model)
    assert [o.name for o in model.graph.output] == ["boxes", "scores", "classes"]
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 64, 64]
    assert f"to {exported.path}" in exported.stdout
    assert "torchvision" not in exported.stderr


def test_export_old_checkpoint_flag_warns_and_works(
    trained: Trained, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the weights format: the flag is read before the format matters, and the ONNX export of a
    # checkpoint is the test above's (10 s of dynamo's export each)
    out = tmp_path / "model.ultralytics.pt"
    argv = ["export", "--checkpoint", str(trained.checkpoint), "--format", "ultralytics"]
    assert main([*argv, "--out", str(out)]) == 0
    assert out.is_file()
    err = capsys.readouterr().err
    assert err == "lucid-yolo: warning: --checkpoint is deprecated; use --ckpt_path\n"


def test_export_without_checkpoint_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export"]) == 2
    assert "export needs exactly one of --ckpt_path" in capsys.readouterr().err


def test_export_unsupported_format_names_supported(
    trained: Trained, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["export", "--ckpt_path", str(trained.checkpoint), "--format", "tflite"]
    assert main(argv) == 2
    assert "--format 'tflite' is not supported; supported: onnx" in capsys.readouterr().err


def test_export_missing_checkpoint_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", "--ckpt_path", str(tmp_path / "none.ckpt")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_export_imgsz_must_be_multiple_of_32(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--ckpt_path", "x", "--imgsz", "100"]) == 2
    assert "--imgsz 100 must be a positive multiple of 32" in capsys.readouterr().err
