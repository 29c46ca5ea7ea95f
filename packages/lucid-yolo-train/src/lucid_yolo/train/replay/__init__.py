"""lucid_yolo.train.replay: the YOLO26 training step bound to the replay library.

One typed option group (:class:`ReplayConfig`, ``--model.replay.*`` on the CLI) says which parts
of the step replay; the regions describe the network, the loss and the evaluation forward to
:mod:`lucid_yolo.replay`; :class:`NetworkReplay` runs them, :class:`UpdateStep` the MuSGD update
and EMA blend, and :class:`StepVerifier` shadows replayed steps with native ones.
"""

from lucid_yolo.train.replay.binding import NetworkReplay
from lucid_yolo.train.replay.config import ReplayConfig
from lucid_yolo.train.replay.regions import (
    FEATURE_KEYS,
    TOTAL,
    EvaluationRegion,
    LossRegion,
    NetworkLossRegion,
    NetworkRegion,
    SegmentHeadRegion,
    branch_groups,
)
from lucid_yolo.train.replay.step_verifier import StepVerifier, training_digest, training_state
from lucid_yolo.train.replay.update_step import UpdateStep

__all__ = [
    # options
    "ReplayConfig",
    # regions of the step
    "FEATURE_KEYS",
    "TOTAL",
    "EvaluationRegion",
    "LossRegion",
    "NetworkLossRegion",
    "NetworkRegion",
    "SegmentHeadRegion",
    "branch_groups",
    # running them
    "NetworkReplay",
    "UpdateStep",
    # runtime verifier
    "StepVerifier",
    "training_digest",
    "training_state",
]
