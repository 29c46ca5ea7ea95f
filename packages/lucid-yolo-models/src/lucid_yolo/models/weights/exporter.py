"""A lucid-yolo network's weights under Ultralytics' names, for use with the reference tools.

The written state dict has exactly the reference's keys and shapes for the network's task and
scale (``model.0.conv.weight`` … ``model.23.one2one_cv3.2.2.bias``), so
``DetectionModel(...).load_state_dict(torch.load(path))`` takes it. A pose network lacks the
reference's RealNVP flow (``model.23.flow_model.*``), which only the reference's training loss
reads: load it there with ``strict=False``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from lucid_yolo.models.exceptions import WeightsError
from lucid_yolo.models.model import YOLO26
from lucid_yolo.models.weights.reference_names import reference_names
from lucid_yolo.models.weights.safetensors_file import write_safetensors

FORMATS = (".pt", ".safetensors")
"""File suffixes :func:`save_reference_weights` writes: a ``torch.save`` state dict, or
safetensors."""


def reference_state_dict(model: YOLO26) -> dict[str, Tensor]:
    """``model``'s state dict under the reference's names (tensors detached, on the CPU)."""
    state = model.state_dict()
    return {name: state[key].detach().cpu().clone() for key, name in reference_names(model).items()}


def save_reference_weights(model: YOLO26, path: str | Path) -> Path:
    """Write :func:`reference_state_dict` to ``path`` (``.pt`` or ``.safetensors``).

    Raises:
        WeightsError: for another suffix.
    """
    file = Path(path)
    if file.suffix not in FORMATS:
        raise WeightsError(
            f"cannot write reference weights to {str(path)!r}: the suffix must be one of "
            f"{', '.join(FORMATS)}"
        )
    file.parent.mkdir(parents=True, exist_ok=True)
    tensors = reference_state_dict(model)
    if file.suffix == ".safetensors":
        write_safetensors(tensors, file, {"format": "pt"})
    else:
        torch.save(tensors, file)
    return file


__all__ = ["FORMATS", "reference_state_dict", "save_reference_weights"]
