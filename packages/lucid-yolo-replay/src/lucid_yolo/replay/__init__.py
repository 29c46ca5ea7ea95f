"""Record regions of a PyTorch training step into CUDA graphs and replay them bitwise.

Three levels, like :mod:`torch.cuda.graphs`: :class:`RegionRecorder` records one region's forward
and backward (:class:`ForwardRecorder`, a forward without autograd, for evaluation);
:class:`ReplayModule` makes an ``nn.Module`` record itself; :class:`ReplayStep` runs
a whole plain-PyTorch training step (forward, loss, backward, update, EMA). Anything a recording
cannot honour retires to native execution with a typed reason. See the "Replay library" docs page.
"""

from lucid_yolo.replay._copies import copy_grouped
from lucid_yolo.replay.digest import first_difference, grads_of, state_digest, tensor_digest
from lucid_yolo.replay.ema import ModelEMA
from lucid_yolo.replay.exceptions import (
    CaptureError,
    FreedActivationsError,
    PoolLeakError,
    ReplayConfigError,
    ReplayError,
    ReplayRetiredWarning,
)
from lucid_yolo.replay.forward import ForwardRecorder
from lucid_yolo.replay.module import ReplayModule
from lucid_yolo.replay.pool import ReplayPool, ScratchLoan
from lucid_yolo.replay.protocols import (
    GroupedRegion,
    ModuleRegion,
    Region,
    RegionOutput,
    UpdateOptimizer,
)
from lucid_yolo.replay.recorder import RegionRecorder
from lucid_yolo.replay.retire import RetireLog, Retirement, RetireReason
from lucid_yolo.replay.signature import Binding, Signature, TensorSpec
from lucid_yolo.replay.step import LossFn, ReplayStep
from lucid_yolo.replay.telemetry import Telemetry, merge_telemetry, recording_cause
from lucid_yolo.replay.update import GraphedOptimizer, UpdateRecorder
from lucid_yolo.replay.verifier import TrainingSnapshot, Verifier

__all__ = [
    # level 1: one region
    "RegionRecorder",
    "ForwardRecorder",
    "ReplayPool",
    "ScratchLoan",
    # level 2: a module that records itself
    "ReplayModule",
    # level 3: a whole plain-PyTorch step
    "LossFn",
    "ReplayStep",
    # update replay
    "GraphedOptimizer",
    "ModelEMA",
    "UpdateRecorder",
    # verifier
    "TrainingSnapshot",
    "Verifier",
    # describing a region
    "GroupedRegion",
    "ModuleRegion",
    "Region",
    "RegionOutput",
    "UpdateOptimizer",
    # signatures
    "Binding",
    "Signature",
    "TensorSpec",
    # retirement and telemetry
    "RetireLog",
    "RetireReason",
    "Retirement",
    "Telemetry",
    "merge_telemetry",
    "recording_cause",
    # batched copies
    "copy_grouped",
    # digests
    "first_difference",
    "grads_of",
    "state_digest",
    "tensor_digest",
    # errors
    "CaptureError",
    "FreedActivationsError",
    "PoolLeakError",
    "ReplayConfigError",
    "ReplayError",
    "ReplayRetiredWarning",
]
