"""Packaged configs resolve by name, with a suggestion for near misses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lucid_yolo.cli.configs import expand_config_names, packaged_configs, resolve_config
from lucid_yolo.cli.errors import CliError
from lucid_yolo.models import model_spec

TASKS = ("detect", "segment", "pose", "obb")


def test_packaged_configs_cover_every_task_and_scale() -> None:
    names = set(packaged_configs())
    assert {f"{t}-{s}" for t in TASKS for s in "nsmlx"} | {"quickstart"} == names


@pytest.mark.parametrize("name", sorted(packaged_configs()))
def test_packaged_config_names_a_registered_model_of_its_task(name: str) -> None:
    config = yaml.safe_load(packaged_configs()[name].read_text())
    spec = model_spec(config["model"]["model"])
    if name != "quickstart":
        assert spec.task == name.split("-")[0]
        assert config["model"]["model"][6] == name.split("-")[1]


def test_resolve_config_keeps_existing_files(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("model: {}\n")
    assert resolve_config(str(path)) == str(path)


def test_resolve_config_suggests_close_names() -> None:
    with pytest.raises(CliError, match="did you mean 'detect-n'"):
        resolve_config("detct-n")


def test_resolve_config_missing_file_names_the_path() -> None:
    with pytest.raises(CliError, match="no such file"):
        resolve_config("nowhere/cfg.yaml")


def test_expand_config_names_rewrites_both_spellings() -> None:
    args = expand_config_names(["--config", "pose-s", "--config=obb-n", "--data.batch_size", "2"])
    assert args[1] == str(packaged_configs()["pose-s"])
    assert args[2] == f"--config={packaged_configs()['obb-n']}"
    assert args[3:] == ["--data.batch_size", "2"]


def test_expand_config_names_rewrites_short_flag() -> None:
    assert expand_config_names(["-c", "detect-m"]) == ["-c", str(packaged_configs()["detect-m"])]
