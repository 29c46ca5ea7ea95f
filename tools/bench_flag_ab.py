"""Whole fits of one benchmark under alternating sets of lucid-yolo flags, each fit its own process.

Why (issue 11): whether an option may become a default (the copy stream, packed batches, the
convolutions' casts made together) is read from whole fits: a fit's peak reserved memory is
its process's, and its times drift with the machine, so the variants must alternate within one
device call. Sessions 44-48 wrote that loop by hand in each call's script. This runs
``bench_side_by_side.py`` once a variant a round, round ``r`` in the given order when ``r`` is
even and reversed when odd (two variants, two rounds: A B B A), each report under
``OUT/v<variant>-r<round>/``; it starts no fit once fewer than ``--min-left`` of ``--budget``
seconds are left (a device call ends at its limit, and a fit cut short reads nothing), and
gives each fit the rest as its timeout. It then prints every fit's readings
(``fit_readings.py``) labelled by its flags, and each variant's medians, and writes both to
``OUT/flag_ab.json``.

Usage (GPU machine, repository root, after ``source tools/gpu_env.sh``)::

    python3 tools/bench_flag_ab.py --out $OUT/ab --budget 420 --rounds 2 \\
        --variant "--model.casts_weights_together true" \\
        --variant "--model.casts_weights_together false" \\
        -- --tasks detect --batch 4 --epochs 3 --imgsz 640 --images 512 --val-images 128 \\
           --tools replay --no-warm-up

Everything after ``--`` goes to ``bench_side_by_side.py`` (not ``--out``, ``--runs-dir``,
``--timeout`` or ``--lucid-args``, which this sets), with one tool named in ``--tools``: the
benchmark's timeout is per fit, so an invocation of two tools could outrun the budget and be
cut before it writes its report (run the tool again for native fits). ``--dry-run`` prints the
commands.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fit_readings import readings

OWN_OPTIONS = ("--out", "--runs-dir", "--timeout", "--lucid-args")
"""The benchmark's options this tool sets for each fit."""
SUMMARY = (
    "whole s",
    "steady epoch s",
    "step ms",
    "without data wait",
    "between steps ms",
    "data wait device %",
    "peak reserved GiB",
)
"""The readings each variant's medians are given for."""
_BENCH_TOOLS = argparse.ArgumentParser(add_help=False)
_BENCH_TOOLS.add_argument("--tools")
"""Reads the benchmark's ``--tools`` (either spelling) from the arguments after ``--``."""
TIMEOUT_MARGIN_S = 5
"""Seconds between a fit's own timeout and the budget's end, for its report to be written."""


def schedule(variants: int, rounds: int) -> Iterator[tuple[int, int]]:
    """``(variant, round)`` in run order: each round every variant once, odd rounds reversed."""
    for r in range(rounds):
        order = range(variants) if r % 2 == 0 else reversed(range(variants))
        for v in order:
            yield v, r


def fit_command(bench_args: list[str], flags: str, folder: Path, timeout_s: int) -> list[str]:
    """The benchmark's command for one fit of one variant."""
    script = Path(__file__).with_name("bench_side_by_side.py")
    return [
        sys.executable,
        str(script),
        *bench_args,
        f"--lucid-args={flags}",
        "--out",
        str(folder),
        "--runs-dir",
        str(folder.with_name(folder.name + "-runs")),
        "--timeout",
        str(timeout_s),
    ]


def run_all(
    args: argparse.Namespace,
    run: Callable[[list[str], Path, int], int] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[dict[str, Any]]:
    """Each scheduled fit's variant, round, folder and exit status (``None``: not started,
    too little of the budget left); ``run(command, folder, timeout_s)`` runs one fit."""
    run = run or _run
    start = clock()
    fits: list[dict[str, Any]] = []
    for v, r in schedule(len(args.variant), args.rounds):
        folder = args.out / f"v{v}-r{r}"
        left = int(args.budget - (clock() - start))
        fit: dict[str, Any] = {"variant": v, "round": r, "folder": str(folder), "exit": None}
        if left >= args.min_left:
            command = fit_command(args.bench_args, args.variant[v], folder, left - TIMEOUT_MARGIN_S)
            fit["exit"] = run(command, folder, left)
        else:
            print(f"v{v} r{r}: not started, {left} s of the budget left", flush=True)
        fits.append(fit)
    return fits


def _run(command: list[str], folder: Path, timeout_s: int) -> int:
    """One fit, its output to ``run.log`` in ``folder``; 124 when cut at ``timeout_s``."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "run.log").open("w") as log:
        try:
            return subprocess.run(
                command, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s
            ).returncode
        except subprocess.TimeoutExpired:
            return 124


def fit_rows(fits: list[dict[str, Any]], variants: list[str]) -> list[dict[str, Any]]:
    """``fit_readings`` rows of every fit whose report exists, each with its variant's flags."""
    rows: list[dict[str, Any]] = []
    for fit in fits:
        report = Path(fit["folder"]) / "side_by_side.json"
        if not report.is_file():
            continue
        for row in readings(json.loads(report.read_text()), f"r{fit['round']}"):
            rows.append({"variant": variants[fit["variant"]], **row})
    return rows


def medians(rows: list[dict[str, Any]], variants: list[str]) -> list[dict[str, Any]]:
    """Per variant and tool: its fits' count and the median of each :data:`SUMMARY` reading."""
    out: list[dict[str, Any]] = []
    for flags in variants:
        for tool in sorted({r["tool"] for r in rows if r["variant"] == flags}):
            mine = [r for r in rows if r["variant"] == flags and r["tool"] == tool]
            entry: dict[str, Any] = {"variant": flags, "tool": tool, "fits": len(mine)}
            for key in SUMMARY:
                values = [r[key] for r in mine if r[key] is not None]
                entry[key] = statistics.median(values) if values else None
            out.append(entry)
    return out


def markdown(entries: list[dict[str, Any]]) -> str:
    """``entries`` as a Markdown table, numbers to three decimals, ``—`` where none."""
    if not entries:
        return "(no fit finished)"
    columns = list(entries[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for entry in entries:
        cells = (_cell(entry[c]) for c in columns)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def parse(argv: list[str]) -> argparse.Namespace:
    """The tool's options, and the benchmark's after ``--``, refused if they set its own."""
    mine, bench = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", required=True, help="one variant's flags")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budget", type=int, default=540, help="seconds for all the fits")
    parser.add_argument("--min-left", type=int, default=45, help="seconds a fit needs to start")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(mine)
    if len(args.variant) < 2 or args.rounds < 1:
        parser.error("give at least two --variant and one round")
    clash = [a for a in bench if a.split("=")[0] in OWN_OPTIONS]
    if clash:
        parser.error(f"{', '.join(clash)} after --: this tool sets {', '.join(OWN_OPTIONS)} itself")
    tools = _BENCH_TOOLS.parse_known_args(bench)[0].tools
    if tools is None or "," in tools:
        parser.error("name one tool after --, as --tools TOOL (each fit gets its own budget)")
    args.bench_args = bench
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.dry_run:
        for v, r in schedule(len(args.variant), args.rounds):
            folder = args.out / f"v{v}-r{r}"
            print(shlex.join(fit_command(args.bench_args, args.variant[v], folder, args.budget)))
        return
    fits = run_all(args)
    rows = fit_rows(fits, args.variant)
    summary = medians(rows, args.variant)
    print(markdown([{k: r[k] for k in ("variant", "report", "tool", *SUMMARY)} for r in rows]))
    print()
    print(markdown(summary))
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"variants": args.variant, "bench_args": args.bench_args, "fits": fits}
    record |= {"readings": rows, "medians": summary}
    (args.out / "flag_ab.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
