"""``lucid-yolo fit`` on broken datasets: refused with the problem, or read with line warnings."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lucid_yolo.cli.main import main

if TYPE_CHECKING:
    from conftest import CliRunner


def _refused_fit_leaves_no_run_folder(
    tiny_data: Path, tiny_fit: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fit is refused (exit 2) after Lightning made its run folder, which is then gone: the
    next run takes ``fit1`` again."""
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--data.yaml", str(tiny_data), *tiny_fit]) == 2
    assert (tmp_path / "runs" / "detect").is_dir()
    assert list((tmp_path / "runs" / "detect").iterdir()) == []


def test_fit_refuses_missing_labels_folder(
    tiny_data: Path,
    tiny_fit: tuple[str, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shutil.rmtree(tiny_data.parent / "labels")
    _refused_fit_leaves_no_run_folder(tiny_data, tiny_fit, tmp_path, monkeypatch)
    assert "has no label file for any of its 4 image(s)" in capsys.readouterr().err


def test_fit_refuses_empty_train_split(
    tiny_data: Path,
    tiny_fit: tuple[str, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for image in (tiny_data.parent / "images" / "train").iterdir():
        image.unlink()
    _refused_fit_leaves_no_run_folder(tiny_data, tiny_fit, tmp_path, monkeypatch)
    assert "split 'train'" in capsys.readouterr().err


def test_fit_reads_non_utf8_image_name_and_prints_skips_as_lines(
    tiny_data: Path, tiny_fit: tuple[str, ...], cli: CliRunner
) -> None:
    images = tiny_data.parent / "images" / "train"
    labels = tiny_data.parent / "labels" / "train"
    for folder, suffix in ((images, ".jpg"), (labels, ".txt")):
        renamed = os.fsencode(folder) + f"/00\xff{suffix}".encode("latin-1")
        os.rename(folder / f"000000{suffix}", renamed)
    (labels / "000001.txt").write_text("0 0.5 0.5\n")
    done = cli("fit", "--data.yaml", str(tiny_data), "--data.policy", "skip", *tiny_fit)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"lucid-yolo: warning: skipped: {labels}/000001.txt:1: 3 columns" in done.stderr
    assert "DataWarning" not in done.stderr
