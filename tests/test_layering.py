"""Layering as a whitelist: replay and models import torch and the standard library, nothing else.

import-linter's contracts forbid the packages above (train, cli, Lightning); they would let a new
third-party dependency in. This walks every module's syntax tree, lazy imports included.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHITELIST = {
    "replay": {"torch", "lucid_yolo.replay"},
    "models": {"torch", "lucid_yolo.models"},
}
"""Per package: the non-standard-library imports it may use (itself and torch)."""


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import statement; relative imports are the package."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            found.append((node.lineno, node.module))
    return found


def _allowed(module: str, own: set[str]) -> bool:
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top == "__future__":
        return True
    return any(module == name or module.startswith(name + ".") for name in own)


@pytest.mark.parametrize("package", sorted(WHITELIST))
def test_package_imports_only_torch_and_the_standard_library(package: str) -> None:
    source = ROOT / "packages" / f"lucid-yolo-{package}" / "src" / "lucid_yolo" / package
    files = sorted(source.rglob("*.py"))
    assert files, f"no sources under {source}"
    offending = [
        f"{path.relative_to(ROOT)}:{line}: import {module}"
        for path in files
        for line, module in _imported_modules(path)
        if not _allowed(module, WHITELIST[package])
    ]
    assert not offending, (
        f"lucid_yolo.{package} may import only torch and the standard library "
        f"(DESIGN §2); move this code to lucid_yolo.train or drop the dependency: {offending}"
    )


def test_whitelist_walk_sees_a_lazy_third_party_import(tmp_path: Path) -> None:
    module = tmp_path / "lazy.py"
    module.write_text("def f():\n    import numpy\n    from lucid_yolo.train import x\n")
    assert [m for _, m in _imported_modules(module) if not _allowed(m, {"torch"})] == [
        "numpy",
        "lucid_yolo.train",
    ]
