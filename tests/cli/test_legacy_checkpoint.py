"""Checkpoints that still hold the retired replay options: refused with a fix that works."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from lucid_yolo.cli.checkpoint import load_checkpoint
from lucid_yolo.cli.errors import CliError
from lucid_yolo.cli.legacy_checkpoint import check_replay_options, retired_options
from lucid_yolo.cli.main import main

if TYPE_CHECKING:
    from conftest import Trained

LEGACY_HPARAMS = {"capture_network": True, "capture_update": False, "verify_every": 0}


def _legacy_copy(source: Path, target: Path) -> Path:
    checkpoint = torch.load(source, map_location="cpu", weights_only=True)
    checkpoint["hyper_parameters"].update(LEGACY_HPARAMS)
    torch.save(checkpoint, target)
    return target


def _fix_command(error: str) -> list[str]:
    """The ``python -c ... PATH`` line of the error, as an argument list."""
    line = next(line for line in error.splitlines() if line.strip().startswith("python -c"))
    return [sys.executable, *shlex.split(line.strip())[1:]]


def test_legacy_checkpoint_names_the_retired_options(tmp_path: Path) -> None:
    path = tmp_path / "old.ckpt"
    torch.save({"hyper_parameters": {"model": "yolo26n", **LEGACY_HPARAMS}}, path)
    expected = re.escape("hold 'capture_network', 'capture_update', 'verify_every'")
    with pytest.raises(CliError, match=expected):
        check_replay_options(path)


def test_current_checkpoint_passes_the_check(tmp_path: Path) -> None:
    path = tmp_path / "new.ckpt"
    torch.save({"hyper_parameters": {"model": "yolo26n", "lr0": 0.01}}, path)
    check_replay_options(path)
    assert retired_options(path) == []


def test_legacy_checkpoint_fix_command_drops_the_keys(tmp_path: Path) -> None:
    path = tmp_path / "old.ckpt"
    torch.save({"hyper_parameters": {"model": "yolo26n", "lr0": 0.5, **LEGACY_HPARAMS}}, path)
    with pytest.raises(CliError) as error:
        check_replay_options(path)
    subprocess.run(_fix_command(str(error.value)), check=True, timeout=120)
    assert retired_options(path) == []
    saved = torch.load(path, weights_only=True)["hyper_parameters"]
    assert saved == {"model": "yolo26n", "lr0": 0.5}


def test_validate_refuses_legacy_checkpoint_with_the_fix(
    trained: Trained, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    legacy = _legacy_copy(trained.checkpoint, tmp_path / "legacy.ckpt")
    assert main(["validate", "--ckpt_path", str(legacy)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lucid-yolo: error: --ckpt_path {str(legacy)!r} was written before")
    assert "python -c" in err


def test_export_loads_legacy_checkpoint_unchanged(trained: Trained, tmp_path: Path) -> None:
    legacy = _legacy_copy(trained.checkpoint, tmp_path / "legacy.ckpt")
    deployed = load_checkpoint(legacy)
    reference = load_checkpoint(trained.checkpoint)
    assert deployed.task == "detect"
    deployed_state = deployed.net.state_dict()
    for name, value in reference.net.state_dict().items():
        assert torch.equal(value, deployed_state[name]), name
