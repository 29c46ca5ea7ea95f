"""Weight-decay / no-decay parameter grouping."""

import pytest
from torch import nn

from lucid_yolo.train.optim import BIAS, NORM, WEIGHT, OptimizerConfigError, param_groups


def _conv_bn_head() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.Linear(8, 4))


def test_param_groups_splits_by_kind() -> None:
    net = _conv_bn_head()
    groups = param_groups(net, weight_decay=5e-4)
    by_kind = {g["kind"]: g for g in groups}
    assert [g["kind"] for g in groups] == [BIAS, NORM, WEIGHT]
    assert by_kind[WEIGHT]["params"] == [net[0].weight, net[3].weight]
    assert by_kind[BIAS]["params"] == [net[0].bias, net[1].bias, net[3].bias]
    assert by_kind[NORM]["params"] == [net[1].weight]
    assert [g["weight_decay"] for g in groups] == [0.0, 0.0, 5e-4]


def test_param_groups_skips_frozen_and_lists_shared_once() -> None:
    conv = nn.Conv2d(3, 3, 1)
    net = nn.Sequential(conv, conv, nn.Conv2d(3, 3, 1))
    net[2].requires_grad_(False)
    groups = param_groups(net, weight_decay=0.0)
    assert [p for g in groups for p in g["params"]] == [conv.bias, conv.weight]


def test_param_groups_drops_empty_groups() -> None:
    groups = param_groups(nn.Linear(4, 2, bias=False), weight_decay=0.1)
    assert [g["kind"] for g in groups] == [WEIGHT]


def test_param_groups_rejects_negative_weight_decay() -> None:
    with pytest.raises(OptimizerConfigError, match=r"weight_decay must be >= 0, got -0\.1"):
        param_groups(nn.Linear(4, 2), weight_decay=-0.1)


def test_param_groups_rejects_model_without_trainable_parameter() -> None:
    with pytest.raises(OptimizerConfigError, match="'ReLU' has no trainable parameter"):
        param_groups(nn.ReLU(), weight_decay=0.0)
