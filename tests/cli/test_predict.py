"""``lucid-yolo predict`` through LightningCLI: JSON in source pixels, PNG overlays, errors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import lightning
import numpy as np
import pytest
import torch

from lucid_yolo.cli.main import main
from lucid_yolo.train import YoloModule
from lucid_yolo.train.geometry import rle_decode

if TYPE_CHECKING:
    from conftest import CliRunner, Trained

# Lightning's advice for an in-process predict on a small CPU machine, and its own pytree call
IN_PROCESS_WARNINGS = (
    "ignore:The '.*dataloader' does not have many workers:UserWarning",
    "ignore:`isinstance.treespec, LeafSpec.` is deprecated:FutureWarning",
)
SHAPES = ("circle", "square", "triangle", "star", "hexagon")


@pytest.mark.filterwarnings(IN_PROCESS_WARNINGS[0])
@pytest.mark.filterwarnings(IN_PROCESS_WARNINGS[1])
def test_predict_folder_writes_one_record_per_image(
    trained: Trained,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    images = trained.data.parent / "images" / "val"
    argv = ["predict", "--ckpt_path", str(trained.checkpoint), "--data.source", str(images)]
    argv += ["--data.workers", "0", "--trainer.enable_progress_bar", "false"]
    assert main([*argv, "--model.val_conf", "0", "--model.max_det", "5"]) == 0
    out = capsys.readouterr().out
    assert out.endswith("predicted 2 image(s), 10 detection(s): runs/detect/predict1\n")
    for image in sorted(images.iterdir()):
        record = json.loads((tmp_path / "runs/detect/predict1" / f"{image.stem}.json").read_text())
        assert set(record) == {"image", "height", "width", "detections"}
        assert record["image"] == str(image)
        assert (record["height"], record["width"]) == (64, 64)
        assert len(record["detections"]) == 5
        scores = [d["score"] for d in record["detections"]]
        assert scores == sorted(scores, reverse=True)
        for detection in record["detections"]:
            assert set(detection) == {"class_id", "class_name", "score", "box"}
            x1, y1, x2, y2 = detection["box"]
            assert 0 <= x1 <= x2 <= 64
            assert 0 <= y1 <= y2 <= 64
            assert detection["class_name"] == SHAPES[detection["class_id"]]


def _fake_checkpoint(path: Path, model: str, imgsz: int = 64) -> Path:
    """A Lightning checkpoint of an untrained module, as a fit would save it (no fit needed)."""
    module = YoloModule(model, num_classes=2, kpt_shape=(3, 3))
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "pytorch-lightning_version": lightning.__version__,
            "class_names": ["cat", "dog"],
            "YoloDataModule": {
                "names": ["cat", "dog"],
                "task": module.task,
                "imgsz": imgsz,
                "kpt_shape": [3, 3] if module.task == "pose" else None,
                "flip_idx": None,
            },
        },
        path,
    )
    return path


def _image(path: Path, height: int, width: int) -> Path:
    rng = np.random.default_rng(0)
    cv2.imwrite(str(path), rng.integers(0, 255, (height, width, 3), dtype=np.uint8))
    return path


def _predict(tmp_path: Path, model: str, *options: str) -> int:
    """In-process ``predict`` of a 48x80 image with an untrained ``model``; output in tmp/out."""
    checkpoint = _fake_checkpoint(tmp_path / "m.ckpt", model)
    image = _image(tmp_path / "wide.png", 48, 80)
    argv = ["predict", "--ckpt_path", str(checkpoint), "--data.source", str(image)]
    argv += ["--data.workers", "0", "--trainer.enable_progress_bar", "false"]
    argv += ["--trainer.default_root_dir", str(tmp_path / "runs")]
    return main([*argv, "--model.val_conf", "0", "--model.max_det", "2", *options])


@pytest.mark.parametrize(
    ("model", "field", "check"),
    [
        ("yolo26n-seg", "mask", lambda m: rle_decode(m["counts"], *m["size"]).shape == (48, 80)),
        ("yolo26n-pose", "keypoints", lambda k: np.asarray(k).shape == (3, 3)),
        ("yolo26n-obb", "rbox", lambda r: len(r) == 5),
    ],
)
@pytest.mark.filterwarnings(IN_PROCESS_WARNINGS[0])
@pytest.mark.filterwarnings(IN_PROCESS_WARNINGS[1])
def test_predict_task_fields_in_source_pixels(
    tmp_path: Path, model: str, field: str, check: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _predict(tmp_path, model, "--output.dir", str(tmp_path / "out")) == 0
    record = json.loads((tmp_path / "out" / "wide.json").read_text())
    assert (record["height"], record["width"]) == (48, 80)
    assert len(record["detections"]) == 2
    for detection in record["detections"]:
        assert callable(check)
        assert check(detection[field])
        assert detection["class_name"] in ("cat", "dog")
    assert "predicted 1 image(s), 2 detection(s)" in capsys.readouterr().out


@pytest.mark.filterwarnings(IN_PROCESS_WARNINGS[0])
@pytest.mark.filterwarnings(IN_PROCESS_WARNINGS[1])
def test_predict_draw_writes_overlay_at_source_size(tmp_path: Path) -> None:
    assert _predict(tmp_path, "yolo26n", "--output.draw", "true") == 0
    overlay = cv2.imread(str(tmp_path / "runs/detect/predict1/wide.png"))
    assert overlay is not None
    assert overlay.shape == (48, 80, 3)
    assert (tmp_path / "runs/detect/predict1/wide.json").is_file()


@pytest.mark.filterwarnings(IN_PROCESS_WARNINGS[0])
@pytest.mark.filterwarnings(IN_PROCESS_WARNINGS[1])
def test_predict_without_draw_writes_no_overlay(tmp_path: Path) -> None:
    assert _predict(tmp_path, "yolo26n") == 0
    assert (tmp_path / "runs/detect/predict1/wide.json").is_file()
    assert not (tmp_path / "runs/detect/predict1/wide.png").exists()


def test_predict_help_lists_checkpoint_source_and_output(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--ckpt_path", "--data.source", "--output.dir", "--output.draw"):
        assert option in out
    assert "default: 0.25" in out.split("--model.val_conf VAL_CONF", 2)[2]


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("lucid-yolo: error: ")
    assert err.count("\n") == 1
    return err


def test_predict_without_checkpoint_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = _image(tmp_path / "a.png", 32, 32)
    assert "predict needs --ckpt_path" in _error(["predict", "--data.source", str(image)], capsys)


def test_predict_missing_checkpoint_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no.ckpt"
    err = _error(["predict", "--ckpt_path", str(missing), "--data.source", "x"], capsys)
    assert f"--ckpt_path {str(missing)!r}: no such file" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"weights": torch.zeros(1)}, "not a lucid-yolo checkpoint"),
        (None, "cannot be read as a checkpoint"),
    ],
    ids=["foreign", "garbage"],
)
def test_predict_non_lucid_checkpoint_is_an_error(
    tmp_path: Path, content: object, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "bogus.ckpt"
    if content is None:
        bogus.write_text("not a checkpoint\n")
    else:
        torch.save(content, bogus)
    err = _error(["predict", "--ckpt_path", str(bogus), "--data.source", "x"], capsys)
    assert err.startswith(f"lucid-yolo: error: --ckpt_path {bogus}: {message}")


def test_predict_without_source_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = _fake_checkpoint(tmp_path / "m.ckpt", "yolo26n")
    err = _error(["predict", "--ckpt_path", str(checkpoint)], capsys)
    assert "predict needs --data.source" in err


@pytest.mark.parametrize(
    ("make_source", "message"),
    [
        (lambda root: root / "nothing", "no such file or folder"),
        (lambda root: root, "holds no image"),
    ],
    ids=["missing", "empty"],
)
def test_predict_bad_source_is_an_error(
    tmp_path: Path, make_source: object, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = _fake_checkpoint(tmp_path / "m.ckpt", "yolo26n")
    assert callable(make_source)
    source = make_source(tmp_path / "folder")
    (tmp_path / "folder").mkdir()
    err = _error(["predict", "--ckpt_path", str(checkpoint), "--data.source", str(source)], capsys)
    assert f"source {str(source)!r}" in err
    assert message in err


def test_predict_bad_conf_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = _fake_checkpoint(tmp_path / "m.ckpt", "yolo26n")
    image = _image(tmp_path / "a.png", 32, 32)
    argv = ["predict", "--ckpt_path", str(checkpoint), "--data.source", str(image)]
    err = _error([*argv, "--model.val_conf", "1.5"], capsys)
    assert "val_conf must be in [0, 1], got 1.5" in err


@pytest.mark.slow
def test_predict_draw_non_utf8_image_name(tmp_path: Path, cli: CliRunner) -> None:
    # OpenCV opening this name segfaulted the process (issue 15), hence the subprocess
    checkpoint = _fake_checkpoint(tmp_path / "m.ckpt", "yolo26n")
    images = tmp_path / "images"
    images.mkdir()
    image = Path(os.fsdecode(os.fsencode(images) + b"/wide\xff.png"))
    image.write_bytes(_image(tmp_path / "wide.png", 48, 80).read_bytes())
    done = cli(
        "predict",
        "--ckpt_path",
        str(checkpoint),
        "--data.source",
        str(images),
        "--data.workers",
        "0",
        "--trainer.enable_progress_bar",
        "false",
        "--output.draw",
        "true",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "runs/detect/predict1"
    overlay = cv2.imdecode(np.frombuffer((out / image.name).read_bytes(), np.uint8), 1)
    assert overlay.shape == (48, 80, 3)
    record = json.loads((out / f"{image.stem}.json").read_bytes())
    assert record["image"] == str(image)
