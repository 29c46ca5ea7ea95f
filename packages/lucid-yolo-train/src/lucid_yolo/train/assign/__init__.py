"""Label assignment: which anchor learns which instance, with static shapes."""

from lucid_yolo.train.assign.rotated_aligned import RotatedTaskAlignedAssigner
from lucid_yolo.train.assign.targets import AssignedTargets
from lucid_yolo.train.assign.task_aligned import TaskAlignedAssigner

__all__ = [
    # targets handed to the losses
    "AssignedTargets",
    # assigners
    "RotatedTaskAlignedAssigner",
    "TaskAlignedAssigner",
]
