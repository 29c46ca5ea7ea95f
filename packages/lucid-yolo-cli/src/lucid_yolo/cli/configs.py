"""Packaged configs, resolvable by name: ``--config detect-n`` instead of a file path.

One config per task and scale (``detect-n`` … ``obb-x``) plus ``quickstart``, which is what
``lucid-yolo fit`` runs when given no config at all.
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

from lucid_yolo.cli.errors import CliError

QUICKSTART = "quickstart"


def _config_dir() -> Path:
    return Path(str(resources.files("lucid_yolo.cli") / "configs"))


def packaged_configs() -> dict[str, Path]:
    """Every packaged config by name (file stem), sorted."""
    return {path.stem: path for path in sorted(_config_dir().glob("*.yaml"))}


def resolve_config(value: str) -> str:
    """Turn ``--config VALUE`` into a path: an existing file stays as it is, a packaged name
    becomes its file.

    Raises:
        CliError: neither a file nor a packaged name; the message suggests the closest names.
    """
    if Path(value).is_file():
        return value
    configs = packaged_configs()
    if value in configs:
        return str(configs[value])
    if value.endswith((".yaml", ".yml", ".json")) or "/" in value:
        raise CliError(f"--config {value!r}: no such file; check the path")
    close = difflib.get_close_matches(value, configs, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise CliError(
        f"--config {value!r} is neither a file nor a packaged config; {hint}"
        f"packaged: {', '.join(configs)}"
    )


def expand_config_names(args: list[str]) -> list[str]:
    """Replace packaged config names after ``--config``/``-c`` (or ``--config=``) by their paths."""
    expanded: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in ("--config", "-c") and index + 1 < len(args):
            expanded += [arg, resolve_config(args[index + 1])]
            index += 2
            continue
        if arg.startswith("--config="):
            arg = "--config=" + resolve_config(arg.split("=", 1)[1])
        expanded.append(arg)
        index += 1
    return expanded


__all__ = ["QUICKSTART", "expand_config_names", "packaged_configs", "resolve_config"]
