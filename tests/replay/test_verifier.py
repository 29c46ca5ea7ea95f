"""CPU tests of the verifier's schedule and the training snapshot."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lucid_yolo.replay import ReplayConfigError, TrainingSnapshot, Verifier
from lucid_yolo.replay.verifier import scaler_tensors, state_tensors


def test_verifier_due_every_nth_step_after_the_first() -> None:
    verifier = Verifier(every=3)
    assert [s for s in range(10) if verifier.due(s)] == [3, 6, 9]


def test_verifier_off_when_zero() -> None:
    assert not any(Verifier(every=0).due(s) for s in range(5))


def test_verifier_rejects_negative_every() -> None:
    with pytest.raises(ReplayConfigError, match="verify_every=-1"):
        Verifier(every=-1)


def test_training_snapshot_restores_weights_grads_state_and_rng() -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    extra = torch.zeros(3)
    net(torch.randn(4, 2)).sum().backward()
    grads = [p.grad.clone() for p in net.parameters() if p.grad is not None]
    snapshot = TrainingSnapshot(net, [extra])
    expected_rng = torch.rand(1)
    with torch.no_grad():
        net[0].weight.add_(1)
        extra.add_(1)
    net(torch.randn(4, 2))
    for p in net.parameters():
        p.grad = None
    snapshot.restore()
    assert torch.equal(torch.rand(1), expected_rng)
    assert not extra.any()
    assert all(torch.equal(p.grad, g) for p, g in zip(net.parameters(), grads, strict=True))
    assert int(net[1].num_batches_tracked) == 1


def test_state_tensors_walks_nested_containers() -> None:
    a, b = torch.zeros(1), torch.ones(1)
    assert state_tensors({0: {"x": a, "y": [b, 3]}}) == [a, b]


def test_scaler_tensors_none_without_scaler() -> None:
    assert scaler_tensors(None) == []
