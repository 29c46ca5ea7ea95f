"""The replayed matching: padding and raised extents change no match; on a GPU, the replay is
the eager matching bit for bit, and it replays."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from lucid_yolo.train.metrics import match_batch, match_extent
from lucid_yolo.train.metrics.match_replay import (
    MatchingRegion,
    MatchReplay,
    match_padded,
    pad_to_powers_of_two,
    power_of_two,
)

OVERLAP_VALUES = (-1.0, 0.0, 0.3, 0.49, 0.5, 0.55, 0.7, 0.95, 1.0)


def _batch(seed: int, device: str = "cpu") -> tuple[Tensor, Tensor, Tensor]:
    """A random padded batch: crowded images, ignored and reusable targets, -1 padding."""
    rng = np.random.default_rng(seed)
    B, D, G = int(rng.integers(1, 5)), int(rng.integers(1, 70)), int(rng.integers(1, 13))
    overlaps = rng.choice(np.array(OVERLAP_VALUES), size=(B, D, G))
    overlaps[rng.random((B, D, G)) < 0.5] = -1.0
    ignore, reusable = rng.random((B, G)) < 0.3, rng.random((B, G)) < 0.2
    return (
        torch.from_numpy(overlaps).to(device),
        torch.from_numpy(ignore).to(device),
        torch.from_numpy(reusable).to(device),
    )


def test_power_of_two_rounds_up() -> None:
    assert [power_of_two(n) for n in (0, 1, 2, 3, 4, 5, 300)] == [1, 1, 2, 4, 4, 8, 512]


def test_padding_marks_the_new_rows_and_columns_as_never_matching() -> None:
    overlaps = torch.full((2, 3, 5), 0.7, dtype=torch.float64)
    flags = torch.ones(2, 5, dtype=torch.bool)
    padded, ignore, reusable = pad_to_powers_of_two(overlaps, flags, flags)
    assert padded.shape == (2, 4, 8)
    assert ignore.shape == reusable.shape == (2, 8)
    assert torch.equal(padded[:, :3, :5], overlaps)
    assert (padded[:, 3:] == -1.0).all()
    assert (padded[:, :, 5:] == -1.0).all()
    assert not ignore[:, 5:].any()
    assert not reusable[:, 5:].any()


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**31))
def test_padded_matching_with_raised_extents_is_the_matching(seed: int) -> None:
    overlaps, ignore, reusable = _batch(seed)
    extent = match_extent(overlaps, reusable).tolist()
    expected = match_batch(overlaps, ignore, reusable, extent=extent)
    padded = match_padded(MatchingRegion(), overlaps, ignore, reusable, extent)
    assert padded[0].shape == expected[0].shape
    assert torch.equal(padded[0], expected[0])
    assert torch.equal(padded[1], expected[1])


def test_padded_matching_of_a_batch_out_of_reach_matches_nothing() -> None:
    overlaps = torch.full((2, 3, 2), 0.2, dtype=torch.float64)
    flags = torch.zeros(2, 2, dtype=torch.bool)
    matched, ignored = match_padded(MatchingRegion(), overlaps, flags, flags, (1, 0, 0))
    assert matched.shape == ignored.shape == (2, 10, 3)
    assert not matched.any()
    assert not ignored.any()


@pytest.mark.gpu
def test_replayed_matching_is_the_eager_matching_and_replays() -> None:
    replay = MatchReplay(torch.device("cuda"))
    for _ in range(3):  # the first call of a shape warms up, the second records
        for seed in (3, 7, 11, 19):
            overlaps, ignore, reusable = _batch(seed, "cuda")  # new tensors: copied in
            extent = match_extent(overlaps, reusable).tolist()
            expected = match_batch(overlaps, ignore, reusable, extent=extent)
            matched, ignored = replay(overlaps, ignore, reusable, extent=extent)
            assert torch.equal(matched, expected[0])
            assert torch.equal(ignored, expected[1])
    telemetry = replay.telemetry.as_dict()
    # each signature's first call warms up natively, every later call replays its recording
    assert telemetry["recordings"] == telemetry["native_calls"] >= 1, telemetry
    assert telemetry["replays"] == 12 - telemetry["native_calls"], telemetry
    assert telemetry["retirements"] == 0, telemetry
