"""Warnings of lucid-yolo printed as one line each, ``lucid-yolo: warning: <message>``.

Python prints a warning as ``path/to/module.py:221: DataWarning: <message>`` followed by the source
line that raised it: noise for a user whose dataset, not our code, is at fault (issue 15). Inside
the console script the warnings whose category lucid-yolo defines (a dataset problem skipped or
read with a note, instances over ``max_instances``) are printed as the message alone, which
already names the file and line at fault; every other warning keeps Python's format.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

PREFIX = "lucid-yolo: warning: "
"""What each of our warning lines starts with (the same as the CLI's other warnings)."""


def is_ours(category: type[Warning]) -> bool:
    """Whether lucid-yolo defines ``category`` (it lives in a ``lucid_yolo.`` module)."""
    return category.__module__.startswith("lucid_yolo.")


@contextmanager
def warning_lines() -> Iterator[None]:
    """Print lucid-yolo's warnings as single lines while the block runs (module docstring)."""
    python_format = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if not is_ours(category):
            python_format(message, category, filename, lineno, file, line)
            return
        print(f"{PREFIX}{message}", file=file or sys.stderr, flush=True)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = python_format


__all__ = ["PREFIX", "is_ours", "warning_lines"]
