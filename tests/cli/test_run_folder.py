"""Run folders ``runs/<task>/<command><N>``: the lowest free number, per task and command."""

from __future__ import annotations

from pathlib import Path

from lucid_yolo.cli.run_folder import next_run_folder


def test_next_run_folder_starts_at_one(tmp_path: Path) -> None:
    assert next_run_folder(tmp_path, "detect", "fit") == tmp_path / "detect/fit1"


def test_next_run_folder_skips_taken_numbers(tmp_path: Path) -> None:
    (tmp_path / "detect/fit1").mkdir(parents=True)
    (tmp_path / "detect/fit2").mkdir()
    assert next_run_folder(tmp_path, "detect", "fit") == tmp_path / "detect/fit3"


def test_next_run_folder_counts_per_command_and_task(tmp_path: Path) -> None:
    (tmp_path / "detect/fit1").mkdir(parents=True)
    assert next_run_folder(tmp_path, "detect", "predict") == tmp_path / "detect/predict1"
    assert next_run_folder(tmp_path, "segment", "fit") == tmp_path / "segment/fit1"


def test_next_run_folder_creates_nothing(tmp_path: Path) -> None:
    next_run_folder(tmp_path, "pose", "validate")
    assert not (tmp_path / "pose").exists()
