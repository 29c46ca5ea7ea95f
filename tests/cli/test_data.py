"""``lucid-yolo data check | synth | convert``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from lucid_yolo.cli import data
from lucid_yolo.cli.main import main
from lucid_yolo.models import TASKS
from lucid_yolo.train.data import progress

if TYPE_CHECKING:
    from conftest import CliRunner


def test_data_task_choices_are_the_models_tasks() -> None:
    assert data.TASKS == TASKS


def test_data_synth_writes_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "set"
    argv = ["data", "synth", "--task", "pose", "--out", str(out), "--train", "3", "--val", "2"]
    assert main([*argv, "--imgsz", "64"]) == 0
    assert "wrote 3 train + 2 val pose images" in capsys.readouterr().out
    spec = yaml.safe_load((out / "data.yaml").read_text())
    assert spec["task"] == "pose"
    assert len(list((out / "images" / "train").iterdir())) == 3
    assert len(list((out / "labels" / "val").iterdir())) == 2


def test_data_synth_rejects_small_imgsz(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "synth", "--out", str(tmp_path), "--imgsz", "32"]) == 2
    assert "--imgsz 32" in capsys.readouterr().err


def test_data_check_clean_dataset_exits_zero(
    tiny_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["data", "check", str(tiny_data)]) == 0
    out = capsys.readouterr().out
    assert "no problems" in out
    assert "train: 4 images" in out


def test_data_check_long_scan_prints_progress_before_the_report(
    tiny_data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "QUIET_SECONDS", 0.0)
    monkeypatch.setattr(progress, "EVERY_SECONDS", 0.0)
    assert main(["data", "check", str(tiny_data)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("data: train: reading labels and image headers: 1/4, ")
    assert lines[0].endswith(" left")
    report = next(i for i, line in enumerate(lines) if line.startswith("  train: 4 images"))
    assert all(line.startswith("data: ") for line in lines[: report - 1])


def test_data_check_broken_row_exits_one_with_file_and_line(
    tiny_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    label = tiny_data.parent / "labels" / "train" / "000001.txt"
    rows = label.read_text().splitlines()
    label.write_text("\n".join([*rows, "0 0.5 0.5"]) + "\n")
    assert main(["data", "check", str(tiny_data)]) == 1
    out = capsys.readouterr().out
    assert "1 error(s)" in out
    assert f"{label}:{len(rows) + 1}:" in out


def test_data_check_warnings_alone_exit_zero(
    tiny_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    label = tiny_data.parent / "labels" / "train" / "000001.txt"
    label.write_text(label.read_text() + "0 0.1 0.1 0.2 0.1 0.2 0.3\n")
    assert main(["data", "check", str(tiny_data)]) == 0
    out = capsys.readouterr().out
    assert "1 warning(s)" in out
    assert "7 columns are read as a triangle" in out


def test_data_check_missing_labels_folder_exits_one(
    tiny_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.rmtree(tiny_data.parent / "labels")
    assert main(["data", "check", str(tiny_data)]) == 1
    assert "has no label file for any of its 4 image(s)" in capsys.readouterr().out


def test_data_check_allow_unlabelled_accepts_missing_labels(
    tiny_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.rmtree(tiny_data.parent / "labels")
    assert main(["data", "check", "--allow-unlabelled", str(tiny_data)]) == 0
    assert "no problems" in capsys.readouterr().out


def test_data_check_prints_non_utf8_file_name_escaped(tiny_data: Path, cli: CliRunner) -> None:
    labels = tiny_data.parent / "labels" / "train"
    images = tiny_data.parent / "images" / "train"
    os.rename(labels / "000000.txt", os.fsencode(labels) + b"/000000\xff.txt")
    os.rename(images / "000000.jpg", os.fsencode(images) + b"/000000\xff.jpg")
    (labels / "000000\udcff.txt").write_text("0 0.5 0.5\n")
    done = cli("data", "check", str(tiny_data))
    assert (done.returncode, done.stderr) == (1, "")
    assert "labels/train/000000\\xff.txt:1: 3 columns do not fit" in done.stdout


def test_data_check_missing_path_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["data", "check", str(tmp_path / "none.yaml")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def _label_rows(root: Path, split: str) -> dict[str, list[list[float]]]:
    return {
        p.stem: [[float(v) for v in line.split()] for line in p.read_text().splitlines()]
        for p in sorted((root / "labels" / split).glob("*.txt"))
    }


def test_data_convert_round_trip_keeps_labels(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    coco = tmp_path / "coco"
    assert (
        main(["data", "convert", "--to", "coco", "--data", str(tiny_data), "--out", str(coco)]) == 0
    )
    images = tiny_data.parent / "images"
    back = tmp_path / "back"
    splits = []
    for split in ("train", "val"):
        splits += ["--split", split, str(coco / f"{split}.json"), str(images / split)]
    assert main(["data", "convert", "--to", "ultralytics", *splits, "--out", str(back)]) == 0
    assert (back / "data.yaml").is_file()
    for split in ("train", "val"):
        before, after = _label_rows(tiny_data.parent, split), _label_rows(back, split)
        assert before.keys() == after.keys()
        for stem, rows in before.items():
            assert len(after[stem]) == len(rows)
            for row, new in zip(rows, after[stem], strict=True):
                assert new == pytest.approx(row, abs=1e-4)
    assert "train:" in capsys.readouterr().out


def test_data_convert_to_ultralytics_needs_splits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["data", "convert", "--to", "ultralytics", "--out", str(tmp_path)]) == 2
    assert "--split NAME JSON IMAGES_DIR" in capsys.readouterr().err


def test_data_convert_missing_yaml_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.yaml"
    assert main(["data", "convert", "--to", "coco", "--data", str(missing), "--out", "x"]) == 2
    assert f"{str(missing)!r}: no such file" in capsys.readouterr().err
