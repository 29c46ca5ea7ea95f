"""tools/bench_flag_ab.py: whole fits under alternating lucid-yolo flags, each its own process."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from side_by_side_runs import replayed_run
from tool_modules import load_tool

ON = "--model.casts_weights_together true"
OFF = "--model.casts_weights_together false"
BENCH = ["--tasks", "detect", "--batch", "4", "--tools", "replay"]


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("bench_flag_ab", monkeypatch)


def test_the_variants_alternate_and_odd_rounds_run_reversed(tool: ModuleType) -> None:
    assert list(tool.schedule(2, 2)) == [(0, 0), (1, 0), (1, 1), (0, 1)]
    assert list(tool.schedule(3, 1)) == [(0, 0), (1, 0), (2, 0)]


def test_each_fit_gets_its_flags_folder_and_the_budget_left(
    tool: ModuleType, tmp_path: Path
) -> None:
    args = tool.parse(
        ["--variant", ON, "--variant", OFF, "--budget", "300", "--out", str(tmp_path), "--", *BENCH]
    )
    now = [0.0]
    commands: list[tuple[list[str], int]] = []

    folders: list[Path] = []

    def run(command: list[str], folder: Path, timeout_s: int) -> int:
        folders.append(folder)
        commands.append((command, timeout_s))
        now[0] += 100.0  # each fit takes 100 s
        return 0

    fits = tool.run_all(args, run=run, clock=lambda: now[0])
    # the third fit starts with 100 s left, the fourth would have 0 (under --min-left 45)
    assert [f["exit"] for f in fits] == [0, 0, 0, None]
    assert [c[1] for c in commands] == [300, 200, 100]
    assert folders == [tmp_path / "v0-r0", tmp_path / "v1-r0", tmp_path / "v1-r1"]
    first = commands[0][0]
    assert first[first.index("--timeout") + 1] == str(300 - tool.TIMEOUT_MARGIN_S)
    assert f"--lucid-args={ON}" in first
    assert f"--lucid-args={OFF}" in commands[1][0]
    assert first[first.index("--out") + 1] == str(tmp_path / "v0-r0")
    assert first[first.index("--runs-dir") + 1] == str(tmp_path / "v0-r0-runs")
    assert first[2 : 2 + len(BENCH)] == BENCH


def test_options_the_tool_sets_are_refused_after_the_separator(
    tool: ModuleType, tmp_path: Path
) -> None:
    with pytest.raises(SystemExit):
        tool.parse(
            [
                "--variant",
                ON,
                "--variant",
                OFF,
                "--out",
                str(tmp_path),
                "--",
                *BENCH,
                "--timeout",
                "9",
            ]
        )
    with pytest.raises(SystemExit):
        tool.parse(["--variant", ON, "--out", str(tmp_path)])  # one variant compares nothing
    for tools in (["--tools", "replay,native"], ["--tools=replay,native"], []):
        with pytest.raises(SystemExit):  # two fits (or the default three) could outrun it
            tool.parse(["--variant", ON, "--variant", OFF, "--out", str(tmp_path), "--", *tools])


def test_each_variant_gets_the_medians_of_its_finished_fits(
    tool: ModuleType, tmp_path: Path
) -> None:
    fits = []
    for v, r, peak in [(0, 0, 0.86), (1, 0, 0.85), (1, 1, 0.85), (0, 1, 0.88)]:
        folder = tmp_path / f"v{v}-r{r}"
        folder.mkdir()
        report = {"runs": [{**replayed_run(70.0 + v, 6.0), "peak_reserved_gib": peak}]}
        (folder / "side_by_side.json").write_text(json.dumps(report))
        fits.append({"variant": v, "round": r, "folder": str(folder), "exit": 0})
    fits.append({"variant": 0, "round": 2, "folder": str(tmp_path / "v0-r2"), "exit": None})
    rows = tool.fit_rows(fits, [ON, OFF])
    assert [r["variant"] for r in rows] == [ON, OFF, OFF, ON]  # the unstarted fit has no row
    on, off = tool.medians(rows, [ON, OFF])
    assert (on["variant"], on["tool"], on["fits"]) == (ON, "replay", 2)
    assert on["peak reserved GiB"] == pytest.approx(0.87)
    assert off["peak reserved GiB"] == pytest.approx(0.85)
    assert on["whole s"] == 70.0
    assert off["whole s"] == 71.0
    assert on["steady epoch s"] == 2.0
    table = tool.markdown([on, off])
    assert table.splitlines()[0].startswith("| variant | tool | fits | whole s")
    assert "0.870" in table


def test_a_dry_run_prints_each_command_and_runs_none(
    tool: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tool.main(
        [
            "--variant",
            ON,
            "--variant",
            OFF,
            "--out",
            str(tmp_path / "ab"),
            "--dry-run",
            "--",
            *BENCH,
        ]
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert [("v0" in line, "v1" in line) for line in lines] == [
        (True, False),
        (False, True),
        (False, True),
        (True, False),
    ]
    assert not (tmp_path / "ab").exists()
