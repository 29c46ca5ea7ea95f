"""Each fit's readings for issue 11's goal table, from ``bench_side_by_side.py`` reports.

The report's own table gives a row per tool (medians over its fits); the goal table also needs
each fit's first epoch against its steady ones (the fixed costs), its step without the data
wait (the step ratio's numerator), the device's span between steps and where the time outside
the steps went. Sessions 43-45 read those from the JSON by hand; this prints them, one line a
fit, with each lucid-yolo fit's ratio to the median of the Ultralytics fits of its report (or,
with ``--ratio round``, to the Ultralytics fit of its own round, as the goal tables of sessions
43 and 46 give it) and each replayed fit's peak memory against the median native fit's of its
report.

Usage (dev machine, on reports a device call brought back):
    python3 tools/fit_readings.py seg/side_by_side.json b16/side_by_side.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench_side_by_side import _lucid_shares, _primary_map

COLUMNS = {
    "report": "",
    "task": "",
    "tool": "",
    "round": "",
    "whole s": ".1f",
    "× Ultralytics": ".2f",
    "start-up s": ".2f",
    "first epoch s": ".2f",
    "steady epoch s": ".3f",
    "validation s": ".2f",
    "step ms": ".2f",
    "without data wait": ".2f",
    "update ms": ".2f",
    "data wait host %": ".1f",
    "data wait device %": ".2f",
    "between steps ms": ".3f",
    "outside steps %": ".1f",
    "peak reserved GiB": ".3f",
    "× native peak": ".3f",
    "mAP50-95": ".4f",
}
"""Each reading's column and its format (``""``: as it is)."""
RATIOS = ("median", "round")
"""What a fit's ratio to Ultralytics divides by (:func:`readings`)."""


def readings(report: dict[str, Any], name: str, ratio: str = "median") -> list[dict[str, Any]]:
    """One dict per fit of ``report`` that finished, keyed by the names of :data:`COLUMNS`
    (``None`` where a fit has no such reading: Ultralytics logs no phases). ``ratio``: each
    lucid-yolo fit's whole fit against the median Ultralytics fit (``"median"``) or against
    the Ultralytics fit of the same round (``"round"``; none where that round has none)."""
    if ratio not in RATIOS:
        raise ValueError(f"ratio={ratio!r}: use one of {', '.join(RATIOS)}")
    finished = [run for run in report["runs"] if run["exit"] == 0]
    reference = [run for run in finished if run["tool"] == "ultralytics"]
    median = _median(run["whole_s"] for run in reference)
    by_round = {run["repeat"]: run["whole_s"] for run in reference}
    native_peak = _median(
        run["peak_reserved_gib"]
        for run in finished
        if run["tool"] == "native" and run.get("peak_reserved_gib") is not None
    )
    rows = []
    for run in finished:
        shares = _lucid_shares(run) if run["tool"] != "ultralytics" else {}
        epochs = [epoch["wall_s"] for epoch in run.get("epochs", [])]
        step = shares.get("step_ms")
        data = shares.get("step_data_ms")
        between = shares.get("between_share")
        rows.append(
            {
                "report": name,
                "task": run["task"],
                "tool": run["tool"],
                "round": run["repeat"],
                "whole s": run["whole_s"],
                "× Ultralytics": _ratio(
                    median if ratio == "median" else by_round.get(run["repeat"]), run
                ),
                "start-up s": run.get("startup_s"),
                "first epoch s": epochs[0] if epochs else None,
                "steady epoch s": statistics.median(epochs[1:]) if len(epochs) > 1 else None,
                "validation s": run.get("val_s"),
                "step ms": step,
                "without data wait": None if step is None or data is None else step - data,
                "update ms": shares.get("step_update_ms"),
                "data wait host %": None if step is None else 100 * shares["data_share"],
                "data wait device %": None if between is None else 100 * between,
                "between steps ms": shares.get("step_between_steps_ms"),
                "outside steps %": None if step is None else 100 * shares["outside_share"],
                "peak reserved GiB": run.get("peak_reserved_gib"),
                "× native peak": (
                    run["peak_reserved_gib"] / native_peak
                    if native_peak
                    and run["tool"] == "replay"
                    and run.get("peak_reserved_gib") is not None
                    else None
                ),
                "mAP50-95": _primary_map(run),
            }
        )
    return rows


def _ratio(baseline: float | None, run: dict[str, Any]) -> float | None:
    """Ultralytics' whole fit over ``run``'s; none for Ultralytics' own fits."""
    return baseline / run["whole_s"] if baseline and run["tool"] != "ultralytics" else None


def _median(values: Iterable[float]) -> float | None:
    """The median of ``values``, ``None`` when there are none."""
    listed = list(values)
    return statistics.median(listed) if listed else None


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table, each column in its format (``—``: no such reading)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = ("—" if row[c] is None else format(row[c], f) for c, f in COLUMNS.items())
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, help="side_by_side.json files")
    parser.add_argument(
        "--ratio",
        choices=RATIOS,
        default="median",
        help="the ratio to Ultralytics: against the median of the report's Ultralytics fits, "
        "or against the same round's",
    )
    args = parser.parse_args(argv)
    rows = []
    for path in args.reports:
        rows += readings(json.loads(path.read_text()), str(path), args.ratio)
    print(markdown(rows))


if __name__ == "__main__":
    main()
