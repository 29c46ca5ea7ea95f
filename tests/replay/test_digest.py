"""Tests of byte digests: bit sensitivity, layouts, containers, first difference."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lucid_yolo.replay import first_difference, grads_of, state_digest, tensor_digest


def test_tensor_digest_sees_the_sign_of_zero() -> None:
    assert tensor_digest(torch.tensor(0.0)) != tensor_digest(torch.tensor(-0.0))


def test_tensor_digest_ignores_strides() -> None:
    x = torch.arange(6.0).view(2, 3).t()
    assert tensor_digest(x) == tensor_digest(x.contiguous())


def test_tensor_digest_includes_dtype_and_shape() -> None:
    x = torch.zeros(4)
    assert tensor_digest(x) != tensor_digest(x.view(2, 2))
    assert tensor_digest(x) != tensor_digest(x.double())


def test_state_digest_flattens_modules_optimizers_and_containers() -> None:
    net = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    digest = state_digest({"net": net, "opt": optimizer, "extra": [1.5, None]})
    assert {"net.weight", "net.bias", "opt.param_groups.0.lr", "extra.0", "extra.1"} <= set(digest)


def test_state_digest_rejects_unknown_objects() -> None:
    with pytest.raises(TypeError, match=r"'object' at 'x'"):
        state_digest({"x": object()})


def test_first_difference_names_the_first_differing_key() -> None:
    a = state_digest({"w": torch.zeros(2), "b": torch.zeros(1)})
    b = state_digest({"w": torch.zeros(2), "b": torch.ones(1)})
    assert first_difference(a, b) == "b"
    assert first_difference(a, a) is None


def test_first_difference_reports_missing_keys() -> None:
    assert first_difference({"a": "1"}, {"a": "1", "b": "2"}) == "b"


def test_grads_of_maps_names_to_gradients() -> None:
    net = nn.Linear(2, 1)
    net(torch.ones(1, 2)).sum().backward()
    grads = grads_of(net)
    assert set(grads) == {"weight", "bias"}
    assert grads["bias"] is not None
