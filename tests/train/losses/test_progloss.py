"""ProgLoss schedule: one-to-many weight 0.8 -> 0.1 linearly over the epochs."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.train.losses import epoch_fraction, o2m_weight, o2m_weight_at


def test_o2m_weight_first_epoch() -> None:
    assert o2m_weight(0, 30) == pytest.approx(0.8)


def test_o2m_weight_last_epoch() -> None:
    assert o2m_weight(29, 30) == pytest.approx(0.1)


def test_o2m_weight_linear_midpoint() -> None:
    assert o2m_weight(5, 11) == pytest.approx(0.45)


def test_o2m_weight_single_epoch_run_starts_at_start() -> None:
    assert o2m_weight(0, 1) == pytest.approx(0.8)


def test_o2m_weight_at_accepts_device_tensor() -> None:
    weight = o2m_weight_at(torch.tensor(1.0))
    assert isinstance(weight, torch.Tensor)
    assert weight.item() == pytest.approx(0.1)


def test_epoch_fraction_rejects_epoch_past_end() -> None:
    with pytest.raises(ValueError, match=r"epoch=30 is outside \[0, 30\)"):
        epoch_fraction(30, 30)


def test_epoch_fraction_rejects_empty_run() -> None:
    with pytest.raises(ValueError, match="at least one epoch"):
        epoch_fraction(0, 0)
