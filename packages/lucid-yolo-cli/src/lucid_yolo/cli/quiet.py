"""Keep a Lightning command's output to lines lucid-yolo wrote and a user needs.

Lightning logs device availability, the seed, a cloud-logging advertisement and "stopped:
max_epochs reached" at INFO, and warns about a logging interval longer than a small epoch, a
loader with few workers (the data module already caps workers at the CPU count), its own use
of a deprecated torch pytree API, and, when ``validate``/``test``/``predict`` load a checkpoint,
about the checkpoint callbacks of the ``fit`` that wrote it (they have nothing to do there).
None of it is actionable for a ``lucid-yolo`` user, whose run
summary comes from :mod:`lucid_yolo.cli.lightning_cli`. The filters apply only while the command
runs, from the command line's entry, so library users of ``lucid_yolo.train`` keep Lightning's
behaviour.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric", "lightning_fabric")
"""Loggers whose INFO lines are hidden while a command runs (warnings and errors still show)."""

HIDDEN_WARNINGS = (
    r"The number of training batches \(\d+\) is smaller than the logging interval",
    r"The '\w+' does not have many workers",
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
    r"Be aware that when using `ckpt_path`, callbacks used to create the checkpoint",
    r".*only one JsonargparseDeprecationWarning per type",
)
"""Message patterns (regular expressions matched at the start) of the warnings hidden."""


@contextmanager
def quiet_lightning() -> Iterator[None]:
    """Hide Lightning's INFO lines and :data:`HIDDEN_WARNINGS` inside the ``with`` block."""
    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        for pattern in HIDDEN_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern)
        warnings.filterwarnings(
            "ignore", category=DeprecationWarning, module="lightning.pytorch.cli"
        )
        for logger in loggers:
            logger.setLevel(logging.WARNING)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)


__all__ = ["HIDDEN_WARNINGS", "LIGHTNING_LOGGERS", "quiet_lightning"]
