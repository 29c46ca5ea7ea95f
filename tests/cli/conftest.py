"""Shared fixtures of the CLI tests: the command line as a process, a tiny dataset, and one trained
checkpoint and its ONNX export per test run.

:func:`run_cli` runs ``python -m lucid_yolo.cli`` as a child forked from a server that imported
torch and Lightning once per xdist worker (``warm_cli.py``; ``warm_cli_server.py`` says what such
a child keeps from a fresh process and what differs), which spares each command about 6 s of
imports. With ``LUCID_TEST_COLD_CLI=1`` in the environment every command is a fresh process
instead, to confirm that a failure is not the warm path's. Tests that start ``sys.executable``
themselves (signals, the fast exit, the allocator) always get a fresh process.

The checkpoint comes from a real ``lucid-yolo fit`` command, the export from ``lucid-yolo
export``. xdist workers each hold their own session, so each is built once per test run under a
file lock in the folder all its workers share (:func:`once_per_run`) and the others reuse it.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from lucid_yolo.cli.cuda_allocator import ALLOCATOR_VARIABLES
from lucid_yolo.train.data.synthetic import generate_synthetic

if TYPE_CHECKING:
    from warm_cli import WarmServers


def _load_warm_cli() -> ModuleType:
    """``warm_cli.py`` as the module ``warm_cli``, which its tests import: no test folder is on
    ``sys.path`` under importlib mode (pyproject.toml's ``pythonpath``)."""
    spec = importlib.util.spec_from_file_location(
        "warm_cli", Path(__file__).with_name("warm_cli.py")
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["warm_cli"] = module
    spec.loader.exec_module(module)
    return module


warm_cli = _load_warm_cli()
WARM_SERVERS = warm_cli.WarmServers(warm_cli.CLI_PRELOAD)
"""This worker's warm CLI servers (:func:`run_cli`), closed at the end of the session."""

LIGHTNING_DEPRECATIONS = (
    # Lightning 2.6's LightningCLI (and the instantiator it stores in checkpoints) calls
    # jsonargparse APIs deprecated in 4.49; not ours to fix. A console run never shows them:
    # DeprecationWarning is hidden outside __main__.
    "ignore::DeprecationWarning:lightning.pytorch.cli",
    "ignore:.*only one JsonargparseDeprecationWarning per type:DeprecationWarning",
)


@pytest.fixture(autouse=True)
def _allocator_variables_kept() -> Iterator[None]:
    """An in-process Lightning command sets the CUDA allocator's variable for its process;
    each test ends with the variables it started with, so none leaks into the next."""
    saved = {name: os.environ.get(name) for name in ALLOCATOR_VARIABLES}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Apply :data:`LIGHTNING_DEPRECATIONS` to the CLI tests (in-process LightningCLI runs)."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            for rule in LIGHTNING_DEPRECATIONS:
                item.add_marker(pytest.mark.filterwarnings(rule))


CliRunner = Callable[..., subprocess.CompletedProcess[str]]

TINY_FIT = (
    "--data.imgsz",
    "64",
    "--data.batch_size",
    "2",
    "--data.workers",
    "0",
    "--trainer.max_epochs",
    "1",
    "--trainer.limit_train_batches",
    "2",
    "--trainer.limit_val_batches",
    "1",
)
"""Settings that make a fit take seconds: 64 px, 2 steps, 1 validation batch."""


def cli_env(cache: Path) -> dict[str, str]:
    """The environment of a CLI subprocess: its own cache folder (one thread per process under
    xdist comes from the suite's conftest)."""
    return dict(os.environ, XDG_CACHE_HOME=str(cache))


def run_cli(*args: str, cwd: Path, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    """``python -m lucid_yolo.cli ARGS`` in ``cwd`` with ``cwd/cache`` as the user cache, warm
    unless ``LUCID_TEST_COLD_CLI=1`` (module docstring); the result and errors are
    ``subprocess.run``'s."""
    env = cli_env(cwd / "cache")
    run = warm_cli.run_cold if os.environ.get(warm_cli.COLD_VARIABLE) == "1" else WARM_SERVERS.run
    result: subprocess.CompletedProcess[str] = run(
        "lucid_yolo.cli", args, cwd=cwd, env=env, timeout=timeout
    )
    return result


@pytest.fixture(scope="session", autouse=True)
def warm_servers() -> Iterator[WarmServers]:
    """This worker's warm CLI servers (:data:`WARM_SERVERS`), ended with its session."""
    yield WARM_SERVERS
    WARM_SERVERS.close()


@pytest.fixture
def cli(tmp_path: Path) -> CliRunner:
    """``cli(*args)`` runs the command in this test's ``tmp_path``."""

    def call(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, cwd=tmp_path, timeout=timeout)

    return call


def make_tiny(root: Path, task: str = "detect") -> Path:
    """4 train / 2 val synthetic images at 64 px, with ``test`` = ``val``; the data.yaml."""
    path = generate_synthetic(root, task=task, num_train=4, num_val=2, imgsz=64, seed=0)  # type: ignore[arg-type]
    data = yaml.safe_load(path.read_text())
    data["test"] = data["val"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def tiny_data(tmp_path: Path) -> Path:
    """A fresh tiny detect dataset in this test's folder (tests may break it)."""
    return make_tiny(tmp_path / "tiny")


@dataclass(frozen=True)
class Trained:
    """The shared tiny fit: its folder, dataset, checkpoint and output."""

    workdir: Path
    data: Path
    checkpoint: Path
    returncode: int
    stdout: str
    stderr: str


def once_per_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], dict[str, Any]]
) -> tuple[Path, dict[str, Any]]:
    """``build(folder)``'s JSON result, built once per test run and shared by every xdist worker.

    The first worker to take the folder's lock builds; the others wait for it and read its result.
    """
    # xdist workers' base folders share a parent that belongs to this run; without xdist that
    # parent holds every run's folder, so the run's own base folder is used
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    shared.mkdir(exist_ok=True)
    result_file = shared / "result.json"
    with (shared / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not result_file.is_file():
            result_file.write_text(json.dumps(build(shared)))
    return shared, json.loads(result_file.read_text())


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    """One ``lucid-yolo fit`` of the tiny dataset, shared by every worker of the session."""

    def fit(shared: Path) -> dict[str, Any]:
        data = make_tiny(shared / "tiny")
        done = run_cli("fit", "--data.yaml", str(data), *TINY_FIT, cwd=shared)
        return {
            "data": str(data),
            "checkpoint": str(shared / "runs/detect/fit1/checkpoints/best.ckpt"),
            "returncode": done.returncode,
            "stdout": done.stdout,
            "stderr": done.stderr,
        }

    shared, saved = once_per_run(tmp_path_factory, "cli-trained", fit)
    return Trained(
        workdir=shared,
        data=Path(saved["data"]),
        checkpoint=Path(saved["checkpoint"]),
        returncode=saved["returncode"],
        stdout=saved["stdout"],
        stderr=saved["stderr"],
    )


@dataclass(frozen=True)
class Exported:
    """The shared tiny fit's checkpoint exported to ONNX by ``lucid-yolo export``, in process."""

    path: Path
    code: int
    stdout: str
    stderr: str


@pytest.fixture(scope="session")
def exported(trained: Trained, tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """One ONNX export of :func:`trained`'s checkpoint for the whole run: each dynamo export takes
    20-28 s on a 2-core dev machine, and three tests of two modules read the same file."""
    from lucid_yolo.cli.main import main

    def export(shared: Path) -> dict[str, Any]:
        path = shared / "model.onnx"
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["export", "--ckpt_path", str(trained.checkpoint), "--out", str(path)])
        return {"path": str(path), "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}

    _, saved = once_per_run(tmp_path_factory, "cli-exported", export)
    return Exported(Path(saved["path"]), saved["code"], saved["stdout"], saved["stderr"])


@pytest.fixture(scope="session")
def tiny_fit() -> tuple[str, ...]:
    """The fast-fit flags (:data:`TINY_FIT`)."""
    return TINY_FIT


@pytest.fixture(scope="session")
def make_dataset() -> Callable[[Path, str], Path]:
    """``make_dataset(root, task)``: a tiny synthetic set (:func:`make_tiny`)."""
    return make_tiny
