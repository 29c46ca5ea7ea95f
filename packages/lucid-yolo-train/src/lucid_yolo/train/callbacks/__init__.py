"""Lightning callbacks and checkpoint IO of the trainer.

Step-phase timing and the per-epoch summary; atomic checkpoints (written in the background
during a fit), the SIGTERM save and the random
generators' state, which together let a fit resume where it stopped; the late non-finite check
on an exception; the set-up's objects kept out of the collector's full passes while training.
"""

from lucid_yolo.train.callbacks.atomic_checkpoint_io import (
    AtomicCheckpointIO,
    BackgroundCheckpointWrites,
    atomic_save,
)
from lucid_yolo.train.callbacks.epoch_summary import (
    EpochSummary,
    replay_line,
    skipped_line,
    validation_table,
)
from lucid_yolo.train.callbacks.pending_update_check import PendingUpdateCheck
from lucid_yolo.train.callbacks.phase_timer import BETWEEN_STEPS, PHASES, PhaseTimer
from lucid_yolo.train.callbacks.rng_state import RngState
from lucid_yolo.train.callbacks.set_up_objects_frozen import SetUpObjectsFrozen
from lucid_yolo.train.callbacks.sigterm_checkpoint import SigtermCheckpoint

__all__ = [
    # reporting
    "EpochSummary",
    "BETWEEN_STEPS",
    "PHASES",
    "PhaseTimer",
    "replay_line",
    "skipped_line",
    "validation_table",
    # checkpoints
    "AtomicCheckpointIO",
    "BackgroundCheckpointWrites",
    "RngState",
    "SigtermCheckpoint",
    "atomic_save",
    # the non-finite loss guard's late check
    "PendingUpdateCheck",
    # the host's pauses
    "SetUpObjectsFrozen",
]
