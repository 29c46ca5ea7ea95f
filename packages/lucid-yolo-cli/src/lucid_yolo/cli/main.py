"""Entry point of the ``lucid-yolo`` console script."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the ``lucid-yolo`` command line."""
    args = sys.argv[1:] if argv is None else argv
    print(f"lucid-yolo: no commands are available yet (got {args!r})", file=sys.stderr)
    return 2
