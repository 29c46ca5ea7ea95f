"""Random generator state: saved as plain tensors, restored at the first batch of a resume."""

from __future__ import annotations

import io
import random

import numpy as np
import torch

from lucid_yolo.train.callbacks import RngState
from lucid_yolo.train.callbacks.rng_state import rng_state, set_rng_state


def _draws() -> tuple[float, float, float]:
    return float(torch.rand(())), float(np.random.rand()), random.random()


def test_rng_state_round_trips_through_weights_only_load() -> None:
    buffer = io.BytesIO()
    torch.save(rng_state(), buffer)
    expected = _draws()
    buffer.seek(0)
    set_rng_state(torch.load(buffer, weights_only=True))
    assert _draws() == expected


def test_rng_state_callback_restores_at_first_batch_only() -> None:
    callback = RngState()
    saved = callback.state_dict()
    expected = _draws()
    callback.load_state_dict(saved)
    _draws()
    callback.on_train_batch_start(None, None, None, 0)  # type: ignore[arg-type]
    assert _draws() == expected
    after = rng_state()
    callback.on_train_batch_start(None, None, None, 1)  # type: ignore[arg-type]
    assert torch.equal(rng_state()["torch"], after["torch"])
