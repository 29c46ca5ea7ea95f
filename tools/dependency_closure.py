"""A virtual environment holding one tool's dependency closure, linked from this interpreter's.

The GPU machine's image carries hundreds of libraries that neither trainer needs, and some
libraries import optional peers whenever they find them installed: Lightning imports torchmetrics,
whose ``__init__`` imports transformers, scipy's signal module and torchvision's models when they
are there. A user who installs lucid-yolo (or Ultralytics) into a fresh environment has only what
the packages require, so the image's extras cost a fit start-up seconds such a user never pays.
This tool builds a virtual environment (no system site-packages) whose site-packages holds
symbolic links to exactly the installed distributions the roots require, transitively, with
markers and extras evaluated: the same files, versions and bytecode as the image, without the
rest. Nothing is downloaded or installed.

Roots are requirements (``--root ultralytics``) or local projects run from source
(``--project packages/lucid-yolo-cli``): a project's ``[project].dependencies`` join the
closure, and a dependency on another given project is followed into that project's list instead
of being looked up among the installed distributions (those projects stay on ``PYTHONPATH``).

A distribution that shares a top-level folder with others (``nvidia/``) brings that whole folder,
so the environment may hold files of distributions outside the closure there, never their
metadata. A requirement with no installed distribution, or an installed version outside its
specifier, is reported (``missing``, ``unsatisfied``) and the environment is built without it:
the fit then shows whether it was needed. ``--substitute NAME=DIST`` resolves a requirement to an
installed distribution of another name that provides the same modules (an image with
``opencv-python`` instead of ``opencv-python-headless``).

Example (GPU machine, repository root)::

    python3 tools/dependency_closure.py --into /tmp/env-lucid \\
        --project packages/lucid-yolo-cli --project packages/lucid-yolo-train \\
        --project packages/lucid-yolo-models --project packages/lucid-yolo-replay \\
        --substitute opencv-python-headless=opencv-python
    /tmp/env-lucid/bin/python -c "import lightning.pytorch"
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import sysconfig
import tomllib
import venv
from collections import deque
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


class ClosureError(Exception):
    """A root that cannot be read, or an environment that cannot be built."""


@dataclass
class Closure:
    """What a set of roots needs from the installed distributions."""

    distributions: dict[str, metadata.Distribution] = field(default_factory=dict)
    """Installed distributions by canonical name."""
    missing: list[str] = field(default_factory=list)
    """``"requirement (required by X)"`` for each requirement with nothing installed."""
    unsatisfied: list[str] = field(default_factory=list)
    """``"requirement: installed V (required by X)"`` where the installed version falls outside."""

    def summary(self) -> dict[str, Any]:
        return {
            "distributions": {
                name: dist.version for name, dist in sorted(self.distributions.items())
            },
            "missing": self.missing,
            "unsatisfied": self.unsatisfied,
        }


def project_requirements(project: Path) -> tuple[str, list[Requirement]]:
    """A local project's canonical name and ``[project].dependencies``."""
    pyproject = project / "pyproject.toml"
    try:
        table = tomllib.loads(pyproject.read_text())["project"]
        name = canonicalize_name(table["name"])
        return name, [Requirement(text) for text in table.get("dependencies", [])]
    except (OSError, KeyError, tomllib.TOMLDecodeError, ValueError) as error:
        raise ClosureError(
            f"{pyproject}: cannot read [project].name and .dependencies ({error}); give "
            "--project a folder holding a pyproject.toml with a [project] table"
        ) from error


def _applies(requirement: Requirement, extras: frozenset[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})


def resolve(
    roots: list[Requirement],
    projects: dict[str, list[Requirement]],
    substitutes: dict[str, str],
) -> Closure:
    """Follow ``roots`` through the installed distributions' ``Requires-Dist``, breadth first.

    A distribution reached again with extras not yet followed is visited again for those.
    """
    closure = Closure()
    followed: dict[str, frozenset[str]] = {}
    queue: deque[tuple[Requirement, str]] = deque(
        (root, "the roots") for root in roots if _applies(root, frozenset())
    )
    while queue:
        requirement, parent = queue.popleft()
        name = canonicalize_name(requirement.name)
        extras = frozenset(requirement.extras)
        seen = followed.get(name)
        if name in projects:
            if seen is None:
                followed[name] = extras
                queue.extend((r, name) for r in projects[name] if _applies(r, frozenset()))
            continue
        installed_name = substitutes.get(name, name)
        try:
            dist = closure.distributions.get(installed_name) or metadata.distribution(
                installed_name
            )
        except metadata.PackageNotFoundError:
            if seen is None:
                closure.missing.append(f"{requirement} (required by {parent})")
                followed[name] = extras
            continue
        if requirement.specifier and not requirement.specifier.contains(
            dist.version, prereleases=True
        ):
            stand_in = "" if installed_name == name else f" as {installed_name}"
            closure.unsatisfied.append(
                f"{requirement}: installed {dist.version}{stand_in} (required by {parent})"
            )
        if seen is not None and extras <= seen:
            continue
        new_extras = extras - (seen or frozenset())
        followed[name] = (seen or frozenset()) | extras
        closure.distributions[canonicalize_name(dist.metadata["Name"])] = dist
        for text in dist.requires or []:
            child = Requirement(text)
            if _applies(child, new_extras) and (seen is None or not _applies(child, frozenset())):
                queue.append((child, name))
    return closure


_TOP_LEVEL_SKIP = re.compile(r"^(\.\.|__pycache__$)")


def top_level_entries(dist: metadata.Distribution) -> tuple[Path, set[str]]:
    """The folder a distribution is installed in and the names it puts there (from its RECORD).

    Files recorded outside that folder (console scripts in ``../../../bin``) are left out: the
    environment runs modules, not scripts.
    """
    files = dist.files
    if files is None:
        raise ClosureError(
            f"{dist.metadata['Name']} {dist.version}: no RECORD of its files, so its modules "
            "cannot be linked; reinstall it with pip or leave it out of the roots"
        )
    location = Path(str(dist.locate_file("")))
    if any(Path(file).is_absolute() for file in files):
        raise ClosureError(
            f"{dist.metadata['Name']} {dist.version}: its RECORD names files by absolute path, "
            "so what it put in its folder is unknown; reinstall it with pip"
        )
    names = {
        file.parts[0] for file in files if file.parts and not _TOP_LEVEL_SKIP.match(file.parts[0])
    }
    return location, names


def site_packages(environment: Path) -> Path:
    """The environment's ``purelib`` folder, as its own interpreter will see it."""
    folders = {"base": str(environment), "platbase": str(environment)}
    return Path(sysconfig.get_path("purelib", scheme="venv", vars=folders))


def build(environment: Path, closure: Closure) -> dict[str, Any]:
    """Create ``environment`` afresh and link every distribution of ``closure`` into it.

    Returns what was linked, and each name two distributions put in different folders (the
    first one's folder is linked).
    """
    venv.EnvBuilder(clear=True, symlinks=True, with_pip=False).create(environment)
    site = site_packages(environment)
    site.mkdir(parents=True, exist_ok=True)
    linked: dict[str, str] = {}
    clashes: list[str] = []
    for name, dist in sorted(closure.distributions.items()):
        location, entries = top_level_entries(dist)
        for entry in sorted(entries):
            source = location / entry
            if not source.exists():
                continue
            if entry in linked:
                if linked[entry] != str(source):
                    clashes.append(f"{entry}: {name} has it in {location}, linked {linked[entry]}")
                continue
            (site / entry).symlink_to(source)
            linked[entry] = str(source)
    return {
        "python": str(environment / "bin" / "python"),
        "site_packages": str(site),
        "linked": len(linked),
        "clashes": clashes,
        **closure.summary(),
    }


def environment_for(
    environment: Path,
    roots: list[str],
    projects: list[Path],
    substitutes: dict[str, str],
) -> dict[str, Any]:
    """Resolve the roots and projects, build the environment; the record of what it holds."""
    local = dict(project_requirements(project) for project in projects)
    try:
        requirements = [Requirement(text) for text in roots]
    except ValueError as error:
        raise ClosureError(f"--root: {error}") from error
    requirements += [req for reqs in local.values() for req in reqs]
    closure = resolve(
        requirements,
        local,
        {canonicalize_name(k): canonicalize_name(v) for k, v in substitutes.items()},
    )
    return build(environment, closure)


def substitute_pair(text: str) -> tuple[str, str]:
    """``NAME=DIST`` as a pair (an ``argparse`` type)."""
    name, sep, dist = text.partition("=")
    if not sep or not name or not dist:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give NAME=DIST, e.g. opencv-python-headless=opencv-python"
        )
    return name, dist


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--into", type=Path, required=True, help="the environment's folder (replaced)"
    )
    parser.add_argument(
        "--root", action="append", default=[], help="a requirement, e.g. ultralytics"
    )
    parser.add_argument(
        "--project",
        type=Path,
        action="append",
        default=[],
        help="a local project folder, run from source",
    )
    parser.add_argument("--substitute", type=substitute_pair, action="append", default=[])
    parser.add_argument("--json", type=Path, default=None, help="write the record here too")
    args = parser.parse_args(argv)
    if not args.root and not args.project:
        parser.error("give at least one --root or --project")
    try:
        record = environment_for(args.into, args.root, args.project, dict(args.substitute))
    except ClosureError as error:
        print(f"dependency_closure: {error}", file=sys.stderr)
        return 2
    if args.json is not None:
        args.json.write_text(json.dumps(record, indent=2))
    print(
        f"{record['python']}: {len(record['distributions'])} distributions, "
        f"{record['linked']} top-level names linked"
    )
    for key in ("missing", "unsatisfied", "clashes"):
        for line in record[key]:
            print(f"  {key}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
