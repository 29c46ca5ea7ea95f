"""Run folders ``runs/<task>/<command><N>``: the lowest free number, per task and command; a
failed command's folder removed while it is still empty."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch import LightningModule, Trainer

from lucid_yolo.cli.run_folder import EmptyRunFolderRemover, next_run_folder


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


def _command_failed(folder: Path, tmp_path: Path) -> None:
    """What Lightning does with the callback when a command fails (the CLI tests of refused data,
    in test_fit_data.py, run the real sequence)."""
    trainer = Trainer(logger=False, enable_progress_bar=False, default_root_dir=tmp_path)
    EmptyRunFolderRemover(folder).on_exception(
        trainer, LightningModule(), RuntimeError("refused in set-up")
    )


def test_a_failed_run_leaves_no_empty_run_folder(tmp_path: Path) -> None:
    folder = tmp_path / "detect/fit1"
    folder.mkdir(parents=True)
    _command_failed(folder, tmp_path)
    assert not folder.exists()
    assert next_run_folder(tmp_path, "detect", "fit") == folder


def test_a_failed_run_keeps_a_run_folder_it_wrote_into(tmp_path: Path) -> None:
    folder = tmp_path / "detect/fit1"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("model: yolo26n\n")
    _command_failed(folder, tmp_path)
    assert (folder / "config.yaml").read_text() == "model: yolo26n\n"


def test_a_failed_run_whose_folder_was_never_made_adds_no_error(tmp_path: Path) -> None:
    _command_failed(tmp_path / "detect/fit1", tmp_path)
    assert not (tmp_path / "detect").exists()
