"""Each fit's readings for issue 11's goal table, from ``bench_side_by_side.py`` reports.

The report's own table gives a row per tool (medians over its fits); the goal table also needs
each fit's first epoch against its steady ones (the fixed costs), its step without the data
wait (the step ratio's numerator), the device's span between steps and where the time outside
the steps went. Sessions 43-45 read those from the JSON by hand; this prints them, one line a
fit, with each lucid-yolo fit's ratio to the median of the Ultralytics fits of its report (or,
with ``--ratio round``, to the Ultralytics fit of its own round, as the goal tables of sessions
43 and 46 give it) and each replayed fit's peak memory against the median native fit's of its
report.

A fit the benchmark cut at its timeout (an Ultralytics fit longer than the device call had
left: sessions 22, 25, 45 and 50) gets a line of its own in a second table: where it was cut,
its finished epochs and the least it would have taken to the end, which bounds each lucid-yolo
fit's ratio from below (:func:`cut_readings`).

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
CUT_COLUMNS = {
    "report": "",
    "task": "",
    "tool": "",
    "round": "",
    "cut at s": ".1f",
    "epochs finished": "",
    "fastest epoch s": ".2f",
    "mean epoch s": ".2f",
    "whole fit at least s": ".1f",
    "lucid-yolo fits × at least": "",
}
"""Each cut fit's reading and its format (:func:`cut_readings`)."""
TIMED_OUT = -1
"""The exit ``bench_side_by_side.py`` records for a fit it cut at its ``--timeout``."""
LAST_PHASE_EPOCHS = 10
"""Both tools' last epochs that train without mosaic (``close_mosaic``, Ultralytics' default and
``--data.close_mosaic``'s): a phase whose epochs may run at another pace than the ones before,
so a cut fit's finished epochs bound only the epochs of their own phase."""


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


def cut_readings(report: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """One dict per fit of ``report`` cut at the benchmark's timeout, keyed by the names of
    :data:`CUT_COLUMNS`.

    The epochs a cut fit finished are those its tool logged (``epoch_metrics``, each with the
    tool's own clock at its end). When the cut came, one more epoch was under way and the rest
    had not begun, so the whole fit would have taken at least the cut's seconds plus each epoch
    not begun at the pace of the fastest finished epoch of its phase (:data:`LAST_PHASE_EPOCHS`;
    the first epoch, which holds the tool's warm-up, left out), or nothing where no epoch of
    that phase has a time on each side: a bound as long as no later epoch runs faster than
    every finished one of its phase (a fit whose epochs kept getting faster may end sooner). It
    is left empty where the report does not say how many epochs were planned, or says fewer
    than the fit finished. A cut Ultralytics fit bounds the ratio of each finished lucid-yolo
    fit of its task and round (as ``--ratio round`` pairs them): at least that much.
    """
    planned = report.get("args", {}).get("epochs")
    rows = []
    for run in report["runs"]:
        if run["exit"] != TIMED_OUT:
            continue
        logged = run.get("epoch_metrics", [])
        finished = max((epoch["epoch"] for epoch in logged), default=-1) + 1
        ends = {e["epoch"]: e["fit_s"] for e in logged if e.get("fit_s") is not None}
        spans = {e: ends[e] - ends[e - 1] for e in ends if e - 1 in ends}
        at_least = None
        if planned is not None and finished <= int(planned):
            last_phase = int(planned) - LAST_PHASE_EPOCHS
            fastest = {
                phase: min((s for e, s in spans.items() if (e >= last_phase) == phase), default=0.0)
                for phase in (False, True)
            }
            not_begun = range(finished + 1, int(planned))
            at_least = run["whole_s"] + sum(fastest[epoch >= last_phase] for epoch in not_begun)
        paired = [
            other
            for other in report["runs"]
            if other["exit"] == 0
            and other["tool"] != "ultralytics"
            and other["task"] == run["task"]
            and other["repeat"] == run["repeat"]
        ]
        rows.append(
            {
                "report": name,
                "task": run["task"],
                "tool": run["tool"],
                "round": run["repeat"],
                "cut at s": run["whole_s"],
                "epochs finished": f"{finished} of {planned if planned is not None else '?'}",
                "fastest epoch s": min(spans.values()) if spans else None,
                "mean epoch s": statistics.mean(spans.values()) if spans else None,
                "whole fit at least s": at_least,
                "lucid-yolo fits × at least": None
                if at_least is None or not paired or run["tool"] != "ultralytics"
                else ", ".join(
                    f"{other['tool']} #{other['repeat']} {at_least / other['whole_s']:.2f}×"
                    for other in paired
                ),
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


def markdown(rows: list[dict[str, Any]], columns: dict[str, str] = COLUMNS) -> str:
    """The rows as a Markdown table, each of ``columns`` in its format (``—``: no such
    reading)."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = ("—" if row[c] is None else format(row[c], f) for c, f in columns.items())
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
    rows, cut = [], []
    for path in args.reports:
        report = json.loads(path.read_text())
        rows += readings(report, str(path), args.ratio)
        cut += cut_readings(report, str(path))
    print(markdown(rows))
    if cut:
        print("\nFits cut at the benchmark's timeout:\n")
        print(markdown(cut, CUT_COLUMNS))


if __name__ == "__main__":
    main()
