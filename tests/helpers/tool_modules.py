"""The scripts under ``tools/`` as modules, for the tests of their pure parts and their smoke runs.

The tools are scripts run by path, not a package, so a test loads one from its file. Registered
in ``sys.modules`` for the test's duration: dataclasses and pickling look a module up there.
"""

from __future__ import annotations

import importlib.util
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


def run_tool_main(
    name: str, args: str, out: Path, monkeypatch: pytest.MonkeyPatch, *, data_root: bool = True
) -> object:
    """``tools/<name>.py <args> --root <out>/data`` with ``OUT=<out>``, its ``main`` called in
    this process (the tool's own smoke run); what ``main`` returned.

    The processes the tool starts (its fits, ranks or variants) still start as on the command
    line; what the tool does itself runs here, which spares an interpreter that would import
    torch and Lightning once more (5 s, 10 s without bytecode: docs/engineering/suite-time.md).
    A tool that fails raises out of the test (``SystemExit`` with its message).
    ``data_root=False`` leaves ``--root`` out, for a tool that writes no dataset."""
    tool = load_tool(name, monkeypatch)
    root = ["--root", str(out / "data")] if data_root else []
    monkeypatch.setenv("OUT", str(out))
    monkeypatch.setattr(sys, "argv", [str(TOOLS / f"{name}.py"), *args.split(), *root])
    return tool.main()
