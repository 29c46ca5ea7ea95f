"""Exporting lucid-yolo weights under Ultralytics' names."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lucid_yolo.models import WeightsError, create_model, read_weights, save_reference_weights
from lucid_yolo.models.weights import read_pickled_checkpoint, reference_state_dict

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_reference_state_dict_has_the_reference_keys_and_values() -> None:
    checkpoint = read_pickled_checkpoint(FIXTURES / "ultralytics-pose.pt").tensors
    weights = read_weights(FIXTURES / "ultralytics-pose.pt")
    model = weights.build()
    model.load_state_dict(weights.tensors)
    exported = reference_state_dict(model)
    assert set(exported) == {k for k in checkpoint if ".flow_model." not in k}
    for key, tensor in exported.items():
        assert torch.equal(tensor.to(checkpoint[key].dtype), checkpoint[key]), key


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_save_reference_weights_round_trips(tmp_path: Path, suffix: str) -> None:
    model = create_model("yolo26n-seg", num_classes=4, seed=5)
    path = save_reference_weights(model, tmp_path / f"exported{suffix}")
    weights = read_weights(path)
    assert (weights.model_name, weights.num_classes) == ("yolo26n-seg", 4)
    for key, tensor in model.state_dict().items():
        assert torch.equal(weights.tensors[key], tensor), key


def test_save_reference_weights_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match=r"suffix must be one of \.pt, \.safetensors"):
        save_reference_weights(create_model("yolo26n"), tmp_path / "weights.onnx")
