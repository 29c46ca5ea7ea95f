"""Training losses of the four tasks on the dual (one-to-many / one-to-one) head."""

from lucid_yolo.train.losses.factory import LOSSES, build_loss
from lucid_yolo.train.losses.gains import LossGains
from lucid_yolo.train.losses.loss_base import BranchContext, DetectionLoss, YoloLoss
from lucid_yolo.train.losses.obb_loss import OBBLoss, angle_loss
from lucid_yolo.train.losses.pose_loss import PoseLoss, laplace_nll
from lucid_yolo.train.losses.progloss import (
    O2M_WEIGHT_END,
    O2M_WEIGHT_START,
    epoch_fraction,
    o2m_weight,
    o2m_weight_at,
)
from lucid_yolo.train.losses.segment_loss import (
    SegmentationLoss,
    crop_weights,
    instance_mask_loss,
    semantic_loss,
    semantic_target,
)

__all__ = [
    # entry point
    "LOSSES",
    "build_loss",
    # task losses and their shared base
    "BranchContext",
    "DetectionLoss",
    "OBBLoss",
    "PoseLoss",
    "SegmentationLoss",
    "YoloLoss",
    # weighting: gains and the ProgLoss schedule
    "LossGains",
    "O2M_WEIGHT_END",
    "O2M_WEIGHT_START",
    "epoch_fraction",
    "o2m_weight",
    "o2m_weight_at",
    # term functions
    "angle_loss",
    "crop_weights",
    "instance_mask_loss",
    "laplace_nll",
    "semantic_loss",
    "semantic_target",
]
