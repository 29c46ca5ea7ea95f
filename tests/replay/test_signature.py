"""Tests of signatures and bindings (docs/replay-invariants.md, invariants 7-12)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lucid_yolo.replay import Binding, RetireReason, TensorSpec
from lucid_yolo.replay.signature import UnsupportedInputError, backend_flags, input_specs


def test_tensor_spec_distinguishes_stride_dtype_and_requires_grad() -> None:
    x = torch.zeros(2, 3)
    specs = {
        TensorSpec.of(x),
        TensorSpec.of(x.t().contiguous().t()),
        TensorSpec.of(x.half()),
        TensorSpec.of(x.clone().requires_grad_()),
    }
    assert len(specs) == 4


def test_tensor_spec_empty_has_exact_layout() -> None:
    x = torch.zeros(2, 3).t()
    y = TensorSpec.of(x).empty()
    assert y.stride() == x.stride()
    assert y.shape == x.shape


def test_input_specs_keep_scalars_and_reject_containers() -> None:
    assert input_specs([1, 2.5, None])[0] == 1
    with pytest.raises(UnsupportedInputError, match="argument 0 is a 'dict'"):
        input_specs([{}])


def test_signature_changes_with_backend_flags() -> None:
    binding = Binding([nn.Linear(2, 2)])
    before = binding.signature([torch.zeros(1, 2)], "cpu")
    saved = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = not saved
    try:
        after = binding.signature([torch.zeros(1, 2)], "cpu")
    finally:
        torch.backends.cudnn.deterministic = saved
    assert before != after
    assert backend_flags() == before.backend


def test_signature_changes_with_grad_requirement_of_parameters() -> None:
    net = nn.Linear(2, 2)
    binding = Binding([net])
    before = binding.signature([torch.zeros(1, 2)], "cpu")
    net.bias.requires_grad_(False)
    assert binding.signature([torch.zeros(1, 2)], "cpu") != before


def test_binding_check_passes_for_untouched_module() -> None:
    assert Binding([nn.Sequential(nn.Linear(2, 2), nn.ReLU())]).check() is None


def test_binding_check_detects_instance_forward_override() -> None:
    net = nn.Sequential(nn.Linear(2, 2))
    binding = Binding([net])
    net[0].forward = lambda x: x  # type: ignore[method-assign]
    problem = binding.check()
    assert problem is not None
    assert problem[0] is RetireReason.FORWARD_ALTERED


def test_binding_check_detects_buffer_replacement() -> None:
    net = nn.BatchNorm1d(2)
    binding = Binding([net])
    net.running_mean = torch.zeros(2)
    problem = binding.check()
    assert problem is not None
    assert problem[0] is RetireReason.PARAMETER_REPLACED


def test_binding_collects_shared_parameters_once() -> None:
    shared = nn.Linear(2, 2)
    assert len(Binding([nn.Sequential(shared, shared)]).parameters) == 2
