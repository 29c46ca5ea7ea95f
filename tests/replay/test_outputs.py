"""Tests of output flattening and prediction groups."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.replay import ReplayConfigError
from lucid_yolo.replay._outputs import OutputLayout


def test_output_layout_round_trips_a_mapping() -> None:
    out = {"o2m.box": torch.zeros(1), "o2o.box": torch.ones(1)}
    layout, flat = OutputLayout.flatten(out)
    rebuilt = layout.rebuild(flat)
    assert isinstance(rebuilt, dict)
    assert list(rebuilt) == ["o2m.box", "o2o.box"]


@pytest.mark.parametrize("output", [torch.zeros(1), (torch.zeros(1),), [torch.zeros(1)]])
def test_output_layout_round_trips_tensor_and_sequences(output: object) -> None:
    layout, flat = OutputLayout.flatten(output)  # type: ignore[arg-type]
    assert type(layout.rebuild(flat)) is type(output)


def test_output_layout_rejects_non_tensor_outputs() -> None:
    with pytest.raises(ReplayConfigError, match=r"\['1'\] are not tensors"):
        OutputLayout.flatten((torch.zeros(1), 3))  # type: ignore[arg-type]


def test_group_indices_of_yolo_style_groups() -> None:
    layout, _ = OutputLayout.flatten(
        {"o2m.box": torch.zeros(1), "o2m.cls": torch.zeros(1), "o2o.box": torch.zeros(1)}
    )
    groups = layout.group_indices({"o2m": ["o2m.box", "o2m.cls"], "o2o": ["o2o.box"]})
    assert groups == {"o2m": (0, 1), "o2o": (2,)}


def test_group_indices_default_one_group_per_output_up_to_three() -> None:
    layout, _ = OutputLayout.flatten((torch.zeros(1),) * 4)
    assert layout.group_indices({}) == {"outputs": (0, 1, 2, 3)}


def test_group_indices_reject_uncovered_output() -> None:
    layout, _ = OutputLayout.flatten({"a": torch.zeros(1), "b": torch.zeros(1)})
    with pytest.raises(ReplayConfigError, match=r"outputs \['b'\] belong to no prediction group"):
        layout.group_indices({"a": ["a"]})
