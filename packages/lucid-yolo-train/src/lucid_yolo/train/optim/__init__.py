"""Optimisation: MuSGD, its parameter groups, the warm-up/decay schedule and the weight EMA.

Everything here keeps its numeric state in device tensors updated in place, so the native optimiser
step and EMA update are exactly what a CUDA-graph update replay records (see
docs/engineering/musgd-ema.md).
"""

from lucid_yolo.train.optim.ema import trainer_ema
from lucid_yolo.train.optim.errors import OptimizerConfigError, OptimizerStateError
from lucid_yolo.train.optim.musgd import HYPERPARAMETERS, NS_DTYPES, PADDED_FLOP_RATIOS, MuSGD
from lucid_yolo.train.optim.newton_schulz import (
    NEWTON_SCHULZ_DTYPES,
    NS_COEFFICIENTS,
    NewtonSchulzChoice,
    NewtonSchulzDtype,
    orthogonalise,
)
from lucid_yolo.train.optim.param_groups import BIAS, NORM, WEIGHT, param_groups
from lucid_yolo.train.optim.schedule import WarmupLinearSchedule
from lucid_yolo.train.optim.shape_buckets import ShapeBuckets

__all__ = [
    # optimiser
    "MuSGD",
    "HYPERPARAMETERS",
    "PADDED_FLOP_RATIOS",
    "NS_DTYPES",
    "orthogonalise",
    "NS_COEFFICIENTS",
    "NEWTON_SCHULZ_DTYPES",
    "NewtonSchulzDtype",
    "NewtonSchulzChoice",
    "ShapeBuckets",
    # parameter groups
    "param_groups",
    "BIAS",
    "NORM",
    "WEIGHT",
    # schedule
    "WarmupLinearSchedule",
    # weight average (lucid_yolo.replay.ModelEMA with the trainer's options)
    "trainer_ema",
    # errors
    "OptimizerConfigError",
    "OptimizerStateError",
]
