"""Pretrained weights: import Ultralytics YOLO26 checkpoints safely, export under their names."""

from lucid_yolo.models.weights.checkpoint_pickle import (
    STAND_IN_NAMES,
    STAND_IN_PREFIXES,
    PickledCheckpoint,
    StandIn,
    read_pickled_checkpoint,
)
from lucid_yolo.models.weights.exporter import (
    FORMATS,
    reference_state_dict,
    save_reference_weights,
)
from lucid_yolo.models.weights.importer import (
    CLASS_DEPENDENT_PREFIXES,
    ImportedWeights,
    WeightsReport,
    load_weights,
    model_name,
    read_weights,
)
from lucid_yolo.models.weights.reference_names import layer_prefixes, reference_names
from lucid_yolo.models.weights.safetensors_file import read_safetensors, write_safetensors

__all__ = [
    # import
    "CLASS_DEPENDENT_PREFIXES",
    "ImportedWeights",
    "WeightsReport",
    "load_weights",
    "model_name",
    "read_weights",
    # export
    "FORMATS",
    "reference_state_dict",
    "save_reference_weights",
    # the naming rule
    "layer_prefixes",
    "reference_names",
    # file formats
    "STAND_IN_NAMES",
    "STAND_IN_PREFIXES",
    "PickledCheckpoint",
    "StandIn",
    "read_pickled_checkpoint",
    "read_safetensors",
    "write_safetensors",
]
