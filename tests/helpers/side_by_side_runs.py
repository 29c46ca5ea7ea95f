"""Runs of a ``bench_side_by_side.py`` report as its JSON holds them, for the tests of the tools
that read reports (``fit_readings.py``, ``bench_flag_ab.py``)."""

from __future__ import annotations


def replayed_run(whole_s: float, first_epoch_s: float) -> dict[str, object]:
    """A finished replayed fit: a 20 ms step (2 ms of it the data wait, 1 ms between steps),
    steady epochs of 2 s after the first, 2.5 GiB peak, final box mAP50-95 0.9."""
    phases = {"data_ms": 2.0, "network_ms": 10.0, "backward_ms": 6.0, "update_ms": 2.0}
    return {
        "task": "detect",
        "tool": "replay",
        "repeat": 0,
        "exit": 0,
        "whole_s": whole_s,
        "startup_s": 6.0,
        "val_s": 3.0,
        "peak_reserved_gib": 2.5,
        "phases_ms": [{**phases, "between_steps_ms": 1.0}] * 4,
        "epochs": [{"wall_s": first_epoch_s, "steps": 50}] + [{"wall_s": 2.0, "steps": 50}] * 4,
        "epoch_metrics": [{"box": 0.5}, {"box": 0.9}],
    }


def ultralytics_run(whole_s: float) -> dict[str, object]:
    """A finished Ultralytics fit, which logs no phases: 3.0 GiB peak, final mAP50-95 0.8."""
    return {
        "task": "detect",
        "tool": "ultralytics",
        "repeat": 0,
        "exit": 0,
        "whole_s": whole_s,
        "startup_s": 4.0,
        "val_s": 12.0,
        "peak_reserved_gib": 3.0,
        "epoch_metrics": [{"box": 0.8}],
    }
