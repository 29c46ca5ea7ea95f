"""A tool's dependency closure: what it links, what it leaves out, what it reports missing."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("dependency_closure", monkeypatch)


def _install(site: Path, name: str, version: str, requires: list[str], record: bool = True) -> None:
    """A distribution as pip leaves it: its package, its metadata and (usually) its RECORD."""
    module = name.replace("-", "_")
    info = site / f"{module}-{version}.dist-info"
    info.mkdir(parents=True)
    (site / module).mkdir()
    (site / module / "__init__.py").write_text(f"NAME = {name!r}\n")
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    (info / "METADATA").write_text(
        "\n".join(lines + [f"Requires-Dist: {r}" for r in requires]) + "\n"
    )
    if record:
        files = [f"{module}/__init__.py", f"{info.name}/METADATA", f"{info.name}/RECORD"]
        (info / "RECORD").write_text("".join(f"{f},,\n" for f in [*files, "../../../bin/x"]))


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "image-site"
    _install(
        site,
        "lcz-app",
        "1.0",
        ["lcz-core>=2", 'lcz-fast; extra == "speed"', 'lcz-old; python_version < "3"'],
    )
    _install(site, "lcz-core", "2.5", ["lcz-base"])
    _install(site, "lcz-base", "0.9", ['lcz-extra; extra == "all"'])
    _install(site, "lcz-fast", "1.0", [])
    _install(site, "lcz-extra", "1.0", [])
    _install(site, "lcz-unneeded", "1.0", [])
    _install(site, "lcz-headful", "4.0", [])
    monkeypatch.syspath_prepend(str(site))
    return site


def _requirements(tool: ModuleType, *texts: str) -> list[object]:
    from packaging.requirements import Requirement

    return [Requirement(t) for t in texts]


def test_closure_follows_requirements_with_markers_and_only_the_extras_asked_for(
    tool: ModuleType, site: Path
) -> None:
    closure = tool.resolve(_requirements(tool, "lcz-app"), {}, {})
    assert sorted(closure.distributions) == ["lcz-app", "lcz-base", "lcz-core"]
    assert closure.missing == []  # lcz-old's marker excludes it
    with_speed = tool.resolve(_requirements(tool, "lcz-app[speed]", "lcz-base[all]"), {}, {})
    assert sorted(with_speed.distributions) == [
        "lcz-app", "lcz-base", "lcz-core", "lcz-extra", "lcz-fast",
    ]  # fmt: skip


def test_a_distribution_reached_again_with_more_extras_brings_them(
    tool: ModuleType, site: Path
) -> None:
    closure = tool.resolve(_requirements(tool, "lcz-base", "lcz-core", "lcz-base[all]"), {}, {})
    assert "lcz-extra" in closure.distributions


def test_missing_and_unsatisfied_requirements_are_reported_with_who_asked(
    tool: ModuleType, site: Path
) -> None:
    closure = tool.resolve(_requirements(tool, "lcz-core>=3", "lcz-nowhere"), {}, {})
    assert closure.missing == ["lcz-nowhere (required by the roots)"]
    assert closure.unsatisfied == ["lcz-core>=3: installed 2.5 (required by the roots)"]
    assert sorted(closure.distributions) == ["lcz-base", "lcz-core"]


def test_each_requirement_is_checked_against_the_installed_version_not_only_the_first(
    tool: ModuleType, site: Path
) -> None:
    closure = tool.resolve(_requirements(tool, "lcz-core>=2", "lcz-core<2.1"), {}, {})
    assert closure.unsatisfied == ["lcz-core<2.1: installed 2.5 (required by the roots)"]


def test_projects_from_source_are_followed_not_looked_up(tool: ModuleType, site: Path) -> None:
    projects = {
        "lcz-cli": _requirements(tool, "lcz-lib", "lcz-app"),
        "lcz-lib": _requirements(tool, "lcz-fast"),
    }
    closure = tool.resolve(_requirements(tool, "lcz-cli"), projects, {})
    assert closure.missing == []
    assert sorted(closure.distributions) == [
        "lcz-app", "lcz-base", "lcz-core", "lcz-fast",
    ]  # fmt: skip


def test_a_substitute_stands_in_for_a_requirement_of_another_name(
    tool: ModuleType, site: Path
) -> None:
    closure = tool.resolve(
        _requirements(tool, "lcz-headless>=4"), {}, {"lcz-headless": "lcz-headful"}
    )
    assert list(closure.distributions) == ["lcz-headful"]
    assert closure.missing == closure.unsatisfied == []
    older = tool.resolve(
        _requirements(tool, "lcz-headless>=5"), {}, {"lcz-headless": "lcz-headful"}
    )
    assert older.unsatisfied == [
        "lcz-headless>=5: installed 4.0 as lcz-headful (required by the roots)"
    ]


def test_the_environment_holds_the_closure_and_nothing_else(
    tool: ModuleType, site: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "lcz-mine"\nversion = "0.1"\ndependencies = ["lcz-core"]\n'
    )
    record = tool.environment_for(tmp_path / "env", [], [project], {})
    assert sorted(record["distributions"]) == ["lcz-base", "lcz-core"]
    linked = Path(record["site_packages"])
    assert (linked / "lcz_core").resolve() == (site / "lcz_core").resolve()
    assert sorted(entry.name for entry in linked.iterdir()) == [
        "lcz_base", "lcz_base-0.9.dist-info", "lcz_core", "lcz_core-2.5.dist-info",
    ]  # fmt: skip
    found = subprocess.run(
        [
            record["python"],
            "-c",
            "import importlib.util as u, lcz_core; "
            "print(lcz_core.NAME, u.find_spec('lcz_app') is None, u.find_spec('pytest') is None)",
        ],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    ).stdout.split()  # fmt: skip
    assert found == ["lcz-core", "True", "True"]


def test_a_distribution_without_a_record_cannot_be_linked(
    tool: ModuleType, site: Path, tmp_path: Path
) -> None:
    _install(site, "lcz-bare", "1.0", [], record=False)
    closure = tool.resolve(_requirements(tool, "lcz-bare"), {}, {})
    with pytest.raises(tool.ClosureError, match=r"lcz-bare 1\.0: no RECORD"):
        tool.build(tmp_path / "env", closure)


def test_a_project_without_a_project_table_is_refused_by_name(
    tool: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.other]\n")
    with pytest.raises(tool.ClosureError, match=r"pyproject\.toml: cannot read \[project\]"):
        tool.project_requirements(tmp_path)


def test_the_command_prints_what_is_missing_and_refuses_bad_input(
    tool: ModuleType, site: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        tool.main(["--into", str(tmp_path / "env"), "--root", "lcz-core", "--root", "lcz-gone"])
        == 0
    )
    out = capsys.readouterr().out
    assert "2 distributions" in out
    assert "missing: lcz-gone (required by the roots)" in out
    assert tool.main(["--into", str(tmp_path / "env"), "--project", str(tmp_path)]) == 2
    assert "give --project a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tool.main(["--into", str(tmp_path / "env"), "--substitute", "no-equals"])


def test_a_record_with_absolute_paths_is_refused_by_name(
    tool: ModuleType, site: Path, tmp_path: Path
) -> None:
    _install(site, "lcz-abs", "1.0", [])
    record = site / "lcz_abs-1.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + f"{site / 'lcz_abs' / '__init__.py'},,\n")
    closure = tool.resolve(_requirements(tool, "lcz-abs"), {}, {})
    with pytest.raises(
        tool.ClosureError, match=r"lcz-abs 1\.0: its RECORD names files by absolute"
    ):
        tool.build(tmp_path / "env", closure)
