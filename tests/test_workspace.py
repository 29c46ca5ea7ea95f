"""The workspace's own contracts: layering, and what `pip install lucid-yolo-replay` pulls in."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("replay", "models", "train", "cli")


def _requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        (metadata_name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    return metadata.get_all("Requires-Dist") or []


@pytest.mark.parametrize("name", PACKAGES)
def test_namespace_package_imports(name: str) -> None:
    module = importlib.import_module(f"lucid_yolo.{name}")
    assert isinstance(module.__all__, list)


def test_lucid_yolo_is_a_pep420_namespace() -> None:
    for package in (ROOT / "packages").iterdir():
        assert not (package / "src" / "lucid_yolo" / "__init__.py").exists(), package


def test_import_contracts_hold() -> None:
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports is not None, "import-linter is not installed in this environment"
    result = subprocess.run(
        [lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.slow
def test_replay_wheel_requires_torch_only(tmp_path: Path) -> None:
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv is not None, "the wheel check needs `uv build`: run the suite through `uv run`"
    subprocess.run(
        [uv, "build", "--package", "lucid-yolo-replay", "--wheel", "--out-dir", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("lucid_yolo_replay-*.whl")
    requirements = _requires_dist(wheel)
    names = {Requirement(r).name for r in requirements}
    assert names == {"torch"}, requirements
