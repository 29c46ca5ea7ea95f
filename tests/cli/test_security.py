"""What a run may touch (issue 15): checkpoints read weights-only, no network, and writes only
under the run folder and the user cache."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lucid_yolo.cli.lightning_cli import trainer_defaults
from lucid_yolo.cli.main import main

if TYPE_CHECKING:
    from conftest import CliRunner, Trained

NO_NETWORK = """
import socket

def _refuse(*args, **kwargs):
    with open({record!r}, "a") as record:
        record.write(repr(args) + "\\n")
    raise OSError("network access refused by the test")

socket.getaddrinfo = _refuse
socket.create_connection = _refuse
for _name in ("connect", "connect_ex", "sendto"):
    _original = getattr(socket.socket, _name)
    def _guarded(self, *args, _original=_original, **kwargs):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            _refuse(*args)
        return _original(self, *args, **kwargs)
    setattr(socket.socket, _name, _guarded)
"""
"""A ``sitecustomize`` that makes every DNS lookup and IP connection fail and records it."""


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_fit_stopped_by_sigterm_exits_143_with_resume_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def stopped(*args: object, **kwargs: object) -> None:
        raise SIGTERMException

    monkeypatch.setattr("lucid_yolo.cli.lightning_cli.YoloCLI", stopped)
    with pytest.raises(SystemExit) as exited:
        main(["fit"])
    assert exited.value.code == 143
    assert "stopped by SIGTERM; resume with --ckpt_path" in capsys.readouterr().err


def _isolated(cwd: Path, *args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    """``lucid-yolo ARGS`` (or python ``code``) in ``cwd`` with no network and home, temp and
    cache inside ``cwd``."""
    site = cwd / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(NO_NETWORK.format(record=str(cwd / "network.log")))
    for folder in ("home", "tmp"):
        (cwd / folder).mkdir(exist_ok=True)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(site), *sys.path]),
        HOME=str(cwd / "home"),
        TMPDIR=str(cwd / "tmp"),
        XDG_CACHE_HOME=str(cwd / "cache"),
    )
    return subprocess.run(
        [sys.executable, "-c", code] if code else [sys.executable, "-m", "lucid_yolo.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _written(root: Path, *inputs: str) -> set[str]:
    """Top folders of every file under ``root`` but the inputs and the test's own scaffolding."""
    scaffolding = {"site", *inputs}
    return {Path(k).parts[0] for k in _tree(root)} - scaffolding


def test_network_guard_records_a_connection(tmp_path: Path) -> None:
    code = "import socket; socket.create_connection(('192.0.2.1', 80), timeout=1)"
    done = _isolated(tmp_path, code=code)
    assert "network access refused by the test" in done.stderr
    assert (tmp_path / "network.log").read_text() == "(('192.0.2.1', 80),)\n"


@dataclass(frozen=True)
class IsolatedFit:
    """The module's one fit: its folder, the dataset it read, that dataset's files before it."""

    folder: Path
    dataset: Path
    dataset_before: dict[str, str]
    done: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def isolated_fit(
    tmp_path_factory: pytest.TempPathFactory,
    make_dataset: Callable[[Path, str], Path],
    tiny_fit: tuple[str, ...],
) -> IsolatedFit:
    """One ``lucid-yolo fit`` of a read-only tiny dataset, :func:`_isolated` (no network; home,
    temp and cache inside its folder): the fit tests below each check one property of it, and
    none changes it."""
    folder = tmp_path_factory.mktemp("isolated-fit")
    data = make_dataset(folder / "tiny", "detect")
    dataset = data.parent
    before = _tree(dataset)
    for path in [dataset, *dataset.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        done = _isolated(folder, "fit", "--data.yaml", str(data), *tiny_fit)
    finally:
        for path in [dataset, *dataset.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
    return IsolatedFit(folder, dataset, before, done)


def test_fit_leaves_dataset_byte_identical_and_writes_only_runs_and_cache(
    isolated_fit: IsolatedFit,
) -> None:
    assert isolated_fit.done.returncode == 0, isolated_fit.done.stderr[-2000:]
    assert _tree(isolated_fit.dataset) == isolated_fit.dataset_before
    assert _written(isolated_fit.folder, isolated_fit.dataset.name) <= {"runs", "cache"}
    assert (isolated_fit.folder / "runs").is_dir()


def test_fit_runs_without_network_and_writes_only_runs_and_cache(
    isolated_fit: IsolatedFit,
) -> None:
    assert isolated_fit.done.returncode == 0, isolated_fit.done.stderr[-2000:]
    assert not (isolated_fit.folder / "network.log").exists()
    assert _written(isolated_fit.folder, isolated_fit.dataset.name) <= {"runs", "cache"}
    assert (isolated_fit.folder / "runs/detect/fit1/checkpoints/last.ckpt").is_file()


def test_predict_runs_without_network_and_writes_only_its_run_folder(
    trained: Trained, tmp_path: Path
) -> None:
    images = trained.data.parent / "images" / "val"
    done = _isolated(
        tmp_path,
        "predict",
        "--ckpt_path",
        str(trained.checkpoint),
        "--data.source",
        str(images),
        "--data.workers",
        "0",
        "--output.draw",
        "true",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (tmp_path / "network.log").exists()
    assert _written(tmp_path) <= {"runs", "cache"}
    assert {Path(k).parts[:2] for k in _tree(tmp_path / "runs")} == {("detect", "predict1")}


def test_every_command_loads_checkpoints_weights_only() -> None:
    for command in ("fit", "validate", "test", "predict"):
        plugins = trainer_defaults(command)["plugins"]
        assert plugins == [
            {"class_path": "lucid_yolo.train.callbacks.atomic_checkpoint_io.AtomicCheckpointIO"}
        ]


class _Planted:
    """Unpickling this runs ``os.mkdir(marker)``: the code a hostile checkpoint would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (os.mkdir, (str(self.marker),))


@pytest.mark.slow
@pytest.mark.parametrize("command", ["validate", "test", "predict"])
def test_checkpoint_with_pickled_object_is_refused_unrun(
    command: str, trained: Trained, tmp_path: Path, cli: CliRunner
) -> None:
    checkpoint = torch.load(trained.checkpoint, map_location="cpu", weights_only=True)
    marker = tmp_path / "planted-code-ran"
    checkpoint["callbacks"]["planted"] = _Planted(marker)
    torch.save(checkpoint, tmp_path / "hostile.ckpt")
    args = ["--ckpt_path", str(tmp_path / "hostile.ckpt"), "--data.workers", "0"]
    source = trained.data.parent / "images" / "val"
    data = (
        ["--data.source", str(source)]
        if command == "predict"
        else ["--data.yaml", str(trained.data)]
    )
    done = cli(command, *args, *data)
    assert done.returncode != 0
    assert "Weights only load failed" in done.stderr
    assert not marker.exists()
