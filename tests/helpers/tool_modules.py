"""The scripts under ``tools/`` as modules, for the tests of their pure parts.

The tools are scripts run by path, not a package, so a test loads one from its file. Registered
in ``sys.modules`` for the test's duration: dataclasses and pickling look a module up there.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def load_tool(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``tools/<name>.py`` as the module ``name``, with ``tools/`` importable while it loads."""
    monkeypatch.syspath_prepend(str(TOOLS))
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def run_tool(
    name: str, args: str, out: Path, *, data_root: bool = True
) -> subprocess.CompletedProcess[str]:
    """``python tools/<name>.py <args> --root <out>/data`` in a child process with ``OUT=<out>``,
    its output captured; the caller checks the return code (the tool's own smoke run).
    ``data_root=False`` leaves ``--root`` out, for a tool that writes no dataset."""
    root = ["--root", str(out / "data")] if data_root else []
    return subprocess.run(
        [sys.executable, str(TOOLS / f"{name}.py"), *args.split(), *root],
        env={**os.environ, "OUT": str(out)},
        capture_output=True,
        text=True,
        check=False,
    )
