"""Lightning callbacks of the trainer: step-phase timing and the per-epoch summary."""

from lucid_yolo.train.callbacks.epoch_summary import EpochSummary, replay_line, validation_table
from lucid_yolo.train.callbacks.phase_timer import PHASES, PhaseTimer

__all__ = [
    "EpochSummary",
    "PHASES",
    "PhaseTimer",
    "replay_line",
    "validation_table",
]
