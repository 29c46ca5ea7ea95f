"""``lucid-yolo predict``: JSON records in source pixels and PNG overlays."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import lightning
import numpy as np
import pytest
import torch

from lucid_yolo.cli.errors import CliError
from lucid_yolo.cli.main import main
from lucid_yolo.cli.predict import list_sources
from lucid_yolo.train import YoloModule
from lucid_yolo.train.data.formats import rle_decode

if TYPE_CHECKING:
    from conftest import CliRunner, Trained


def test_predict_trained_checkpoint_writes_json_and_overlay(
    cli: CliRunner, trained: Trained, tmp_path: Path
) -> None:
    images = trained.data.parent / "images" / "val"
    done = cli(
        "predict",
        "--checkpoint",
        str(trained.checkpoint),
        "--source",
        str(images),
        "--conf",
        "0",
        "--max-det",
        "5",
        "--out",
        "out",
        "--draw",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for image in sorted(images.iterdir()):
        record = json.loads((tmp_path / "out" / f"{image.stem}.json").read_text())
        assert record["image"] == str(image)
        assert (record["height"], record["width"]) == (64, 64)
        assert 0 < len(record["detections"]) <= 5
        scores = [d["score"] for d in record["detections"]]
        assert scores == sorted(scores, reverse=True)
        for detection in record["detections"]:
            x1, y1, x2, y2 = detection["box"]
            assert 0 <= x1 <= x2 <= 64
            assert 0 <= y1 <= y2 <= 64
            assert detection["class_name"] in ("circle", "square", "triangle", "star", "hexagon")
        overlay = cv2.imread(str(tmp_path / "out" / f"{image.stem}.png"))
        assert overlay is not None
        assert overlay.shape == (64, 64, 3)


def _fake_checkpoint(path: Path, model: str) -> Path:
    """A Lightning-format checkpoint of an untrained module (no fit needed)."""
    module = YoloModule(model, num_classes=2, kpt_shape=(3, 3))
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "pytorch-lightning_version": lightning.__version__,
            "class_names": ["cat", "dog"],
            "YoloDataModule": {"imgsz": 64},
        },
        path,
    )
    return path


def _image(path: Path, height: int, width: int) -> Path:
    rng = np.random.default_rng(0)
    cv2.imwrite(str(path), rng.integers(0, 255, (height, width, 3), dtype=np.uint8))
    return path


@pytest.mark.parametrize(
    ("model", "field", "check"),
    [
        ("yolo26n-seg", "mask", lambda m: rle_decode(m["counts"], *m["size"]).shape == (48, 80)),
        ("yolo26n-pose", "keypoints", lambda k: np.asarray(k).shape == (3, 3)),
        ("yolo26n-obb", "rbox", lambda r: len(r) == 5),
    ],
)
def test_predict_task_fields_in_source_pixels(
    tmp_path: Path, model: str, field: str, check: object, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = _fake_checkpoint(tmp_path / "m.ckpt", model)
    image = _image(tmp_path / "wide.png", 48, 80)
    out = tmp_path / "out"
    argv = ["predict", "--checkpoint", str(checkpoint), "--source", str(image), "--conf", "0"]
    assert main([*argv, "--max-det", "2", "--out", str(out), "--draw"]) == 0
    record = json.loads((out / "wide.json").read_text())
    assert (record["height"], record["width"]) == (48, 80)
    assert len(record["detections"]) == 2
    for detection in record["detections"]:
        assert callable(check)
        assert check(detection[field])
        assert detection["class_name"] in ("cat", "dog")
    assert (out / "wide.png").is_file()
    assert "predicted 1 image(s), 2 detection(s)" in capsys.readouterr().out


def test_predict_missing_checkpoint_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = _image(tmp_path / "a.png", 32, 32)
    assert main(["predict", "--checkpoint", str(tmp_path / "no.ckpt"), "--source", str(image)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lucid-yolo: error: --checkpoint")
    assert "no such file" in err


def test_predict_not_a_checkpoint_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = _image(tmp_path / "a.png", 32, 32)
    bogus = tmp_path / "bogus.ckpt"
    torch.save({"weights": torch.zeros(1)}, bogus)
    assert main(["predict", "--checkpoint", str(bogus), "--source", str(image)]) == 2
    assert "is not a lucid-yolo checkpoint" in capsys.readouterr().err


def test_predict_bad_conf_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--checkpoint", "x", "--source", "y", "--conf", "1.5"]) == 2
    assert "--conf 1.5 must be in [0, 1]" in capsys.readouterr().err


def test_list_sources_missing_path(tmp_path: Path) -> None:
    with pytest.raises(CliError, match="no such file or folder"):
        list_sources(str(tmp_path / "nothing"))


def test_list_sources_folder_without_images(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(CliError, match="holds no image"):
        list_sources(str(tmp_path))


def test_list_sources_stem_clash(tmp_path: Path) -> None:
    _image(tmp_path / "a.png", 8, 8)
    _image(tmp_path / "a.jpg", 8, 8)
    with pytest.raises(CliError, match=r"\['a'\] share a name"):
        list_sources(str(tmp_path))
