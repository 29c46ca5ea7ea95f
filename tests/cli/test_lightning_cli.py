"""``lucid-yolo fit | validate | test`` through LightningCLI, as subprocesses."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from lucid_yolo.cli.embedded import VERSION
from lucid_yolo.cli.main import main

if TYPE_CHECKING:
    from conftest import CliRunner, Trained

FINAL = re.compile(r"^final: box mAP50-95 [0-9.]+ mAP50 [0-9.]+ \| checkpoint: \S+\.ckpt$", re.M)


def test_fit_tiny_run_prints_final_line_and_saves_checkpoint(trained: Trained) -> None:
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert FINAL.search(trained.stdout), trained.stdout[-2000:]
    assert trained.checkpoint.is_file()


def test_fit_print_config_shows_resolved_options(
    tiny_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "detect-s", "--data.yaml", str(tiny_data), "--print_config"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "model: yolo26s" in out
    assert "capture_network: false" in out
    assert f"yaml: {tiny_data}" in out


def test_fit_accepts_verify_every(tiny_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fit", "--data.yaml", str(tiny_data), "--model.verify_every", "3", "--print_config"]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 0
    assert "verify_every: 3" in capsys.readouterr().out


def test_validate_checkpoint_logs_box_map(
    cli: CliRunner, trained: Trained, tiny_fit: tuple[str, ...]
) -> None:
    done = cli(
        "validate",
        "--data.yaml",
        str(trained.data),
        "--data.imgsz",
        "64",
        "--data.workers",
        "0",
        "--ckpt_path",
        str(trained.checkpoint),
        "--model.lr0",
        "0.5",
        "--output.draw",
        "true",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "val/box/mAP50-95" in done.stdout
    assert "warning: --model.lr0 is ignored: with --ckpt_path" in done.stderr
    assert "warning: --output.draw is ignored: only `predict`" in done.stderr


def test_test_checkpoint_logs_box_map_at_the_trained_size(
    cli: CliRunner, trained: Trained, tmp_path: Path
) -> None:
    done = cli(
        "test",
        "--data.yaml",
        str(trained.data),
        "--data.workers",
        "0",
        "--ckpt_path",
        str(trained.checkpoint),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "test/box/mAP50-95" in done.stdout
    (saved,) = (tmp_path / "runs").glob("lightning_logs/version_*/config.yaml")
    assert "imgsz: 64" in saved.read_text()


@pytest.mark.slow
def test_fit_without_arguments_trains_quickstart(cli: CliRunner, tmp_path: Path) -> None:
    done = cli("fit", timeout=900.0)
    assert done.returncode == 0, done.stderr[-2000:]
    assert FINAL.search(done.stdout), done.stdout[-2000:]
    assert (
        tmp_path / "cache" / "lucid-yolo" / f"synthetic-detect-v{VERSION}" / ".complete"
    ).is_file()


def test_fit_logs_and_checkpoints_follow_default_root_dir(
    cli: CliRunner, tiny_data: Path, tiny_fit: tuple[str, ...], tmp_path: Path
) -> None:
    root = tmp_path / "elsewhere"
    done = cli(
        "fit",
        "--data.yaml",
        str(tiny_data),
        *tiny_fit,
        "--trainer.max_epochs",
        "2",
        "--trainer.default_root_dir",
        str(root),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = root / "lightning_logs/version_0"
    assert (run / "metrics.csv").is_file()
    assert (run / "checkpoints/best.ckpt").is_file()
    last = torch.load(run / "checkpoints/last.ckpt", weights_only=True, map_location="cpu")
    assert last["epoch"] == 1  # rewritten every epoch, not only on a new best
