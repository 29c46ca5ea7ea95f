"""A validation table per epoch, the replay telemetry when replay is on, and the steps left out
for a non-finite loss.

Reads only what the module logged (``val/<kind>/<stat>``, ``replay/<counter>``), so it works for
every task and prints nothing the logs do not already hold. Printing is rank-zero only.
"""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_only
from rich.console import Console
from rich.table import Table
from typing_extensions import override

from lucid_yolo.train.console import print_line
from lucid_yolo.train.non_finite_loss import SKIPPED_STEPS

STATS = ("P", "R", "mAP50", "mAP50-95")
"""Columns of the table, in order."""

_REPLAY_KEYS = ("recordings", "replays", "graph_launches", "native_calls", "retirements")


def validation_table(
    metrics: dict[str, float], epoch: int | None, stage: str = "val"
) -> Table | None:
    """A table with one row per metric kind of ``stage`` in ``metrics`` (``None`` when none).

    ``epoch`` titles the table of a fit; ``None`` (a ``validate`` or ``test`` run, which has no
    epoch of its own: Lightning counts 0) leaves it out. ``stage`` is the metrics' prefix:
    ``"val"`` or ``"test"`` (the ``test`` command logs the same metrics under ``test/``).
    """
    kinds = sorted({key.split("/")[1] for key in metrics if key.count("/") == 2})
    rows = [k for k in kinds if any(f"{stage}/{k}/{s}" in metrics for s in STATS)]
    if not rows:
        return None
    name = "validation" if stage == "val" else stage
    table = Table(title=name if epoch is None else f"{name}, epoch {epoch}")
    table.add_column("metric")
    for stat in STATS:
        table.add_column(stat, justify="right")
    for kind in rows:
        cells = [metrics.get(f"{stage}/{kind}/{stat}") for stat in STATS]
        table.add_row(kind, *("-" if c is None else f"{c:.4f}" for c in cells))
    return table


def replay_line(metrics: dict[str, float]) -> str | None:
    """One line of replay counters and retirement reasons (``None`` when replay is off)."""
    counters = {
        k.removeprefix("replay/"): int(v) for k, v in metrics.items() if k.startswith("replay/")
    }
    if not counters:
        return None
    main = ", ".join(f"{k} {counters[k]}" for k in _REPLAY_KEYS if k in counters)
    reasons = [
        f"{k.removeprefix('retired.')} {v}"
        for k, v in counters.items()
        if k.startswith("retired.") and v
    ]
    return f"replay: {main}" + (f" (retired: {', '.join(reasons)})" if reasons else "")


def skipped_line(metrics: dict[str, float]) -> str | None:
    """``non-finite loss: N step(s) skipped so far`` (``None`` when none was)."""
    skipped = int(metrics.get(SKIPPED_STEPS, 0))
    return f"non-finite loss: {skipped} step(s) skipped so far" if skipped else None


class EpochSummary(Callback):
    """Print the validation table and the replay counters after each validation, and the test
    table and its replay counters after a test.

    The tables go through rich; the lines through :func:`~lucid_yolo.train.console.print_line`,
    unwrapped: rich wraps at 80 columns where the output is no terminal (a log file, CI), which
    split the replay counters mid-line.

    Fires in ``on_validation_end`` / ``on_test_end``, after the module's epoch-end hook has logged
    the metrics.
    """

    def __init__(self) -> None:
        self._console = Console()

    @override
    @rank_zero_only
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        fitting = trainer.state.fn == TrainerFn.FITTING
        table = validation_table(metrics, trainer.current_epoch if fitting else None)
        if table is not None:
            self._console.print(table)
        for line in (replay_line(metrics), skipped_line(metrics)):
            if line is not None:
                print_line(line)

    @override
    @rank_zero_only
    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        table = validation_table(metrics, None, stage="test")
        if table is not None:
            self._console.print(table)
        line = replay_line(metrics)
        if line is not None:
            print_line(line)


__all__ = ["STATS", "EpochSummary", "replay_line", "skipped_line", "validation_table"]
