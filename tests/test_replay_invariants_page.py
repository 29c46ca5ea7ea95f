"""docs/replay-invariants.md names tests that exist, for all numbered invariants."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "replay-invariants.md"


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    return {n for n in names if n.startswith("test_")}


def _cited() -> list[tuple[Path, str]]:
    """(file, test) pairs of the page, where ``::name`` alone repeats the last file."""
    cited: list[tuple[Path, str]] = []
    current: Path | None = None
    for path, name in re.findall(r"`(tests/[\w/]+\.py)?::(test_\w+)`", PAGE.read_text()):
        current = ROOT / path if path else current
        assert current is not None, f"{name!r} is cited before any test file on {PAGE}"
        cited.append((current, name))
    return cited


def test_replay_invariants_page_cites_existing_tests() -> None:
    missing = [
        f"{path.relative_to(ROOT)}::{name}"
        for path, name in _cited()
        if not path.is_file() or name not in _test_names(path)
    ]
    assert not missing, f"cited on {PAGE.name} but not found: {missing}"


def test_replay_invariants_page_numbers_every_row_once() -> None:
    numbers = [int(n) for n in re.findall(r"^\| (\d+) \|", PAGE.read_text(), flags=re.MULTILINE)]
    assert numbers == list(range(1, len(numbers) + 1))
