"""The batch matching replayed from CUDA graphs, one per padded shape and matching extent.

:func:`~lucid_yolo.train.metrics.coco_matching.match_batch` runs a few rounds of some forty
small operators on a batch's overlaps. On a GPU each is a kernel launched by the host, and a
segment validation pass is bound by those launches: 62,000 kernels for 128 images with the
GPU busy 0.18 s of about 1 s, some 13,000 of them in the matching (issue 11, session 23).
Replayed, a batch's matching is three pads, three copies in, one graph launch and two copies
out.

A graph is recorded per input shape and extent, so both are rounded up, to the next power of
two, so that few graphs serve a whole validation set: the prediction rows ``D`` and target
columns ``G`` are padded with overlaps of -1 (pairs that can never match), and the rounds, the
rows within reach and the columns within reach are raised. None of this changes a result: a
round after every prediction has settled changes nothing, and a padded row or column, or one
taken in beyond the reach, never holds an overlap at or above the lowest threshold, so it is
never a candidate; the padded rows' outcomes are cut off again. Matches are booleans, so the
replayed result is the eager one bit for bit (tested on a GPU against :func:`match_batch`).

The signature also holds the autocast state, so a batch matched inside a bf16 validation step
and one of the same shape matched at the pass's end (outside it) get a graph each. The graphs
live in a pool of their own, beside the training step's, for the whole run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor

from lucid_yolo.replay import ForwardRecorder, ReplayPool, Telemetry
from lucid_yolo.train.metrics.coco_matching import match_batch

MAX_SIGNATURES = 64
"""Matching graphs recorded per device; a further shape and extent runs eagerly."""


class MatchingRegion:
    """:func:`match_batch` as a region: tensors, then the extent's three integers."""

    def __call__(
        self,
        overlaps: Tensor,
        ignore: Tensor,
        reusable: Tensor,
        rounds: int,
        rows: int,
        cols: int,
    ) -> tuple[Tensor, Tensor]:
        return match_batch(overlaps, ignore, reusable, extent=(rounds, rows, cols))

    def region_modules(self) -> Sequence[torch.nn.Module]:
        """None: the matching reads no parameter or buffer."""
        return ()


class MatchReplay:
    """:func:`match_batch` with the extent already on the host, replayed on a CUDA device.

    Args:
        device: the CUDA device the overlaps are on.
        max_signatures: graphs recorded at most (one per padded shape and extent).
    """

    def __init__(self, device: torch.device, max_signatures: int = MAX_SIGNATURES) -> None:
        self._recorder = ForwardRecorder(
            MatchingRegion(),
            name="matching",
            warmup_steps=1,
            max_signatures=max_signatures,
            pool=ReplayPool(device),
            clone_outputs=True,
        )

    @property
    def telemetry(self) -> Telemetry:
        """The recorder's counters: recordings, replays, native calls and why."""
        return self._recorder.telemetry

    def __call__(
        self, overlaps: Tensor, ignore: Tensor, reusable: Tensor, *, extent: Sequence[int]
    ) -> tuple[Tensor, Tensor]:
        """``match_batch(overlaps, ignore, reusable, extent=extent)``, the same bits.

        Args:
            overlaps: (B, D, G) float64 on the device, -1 for pairs that never match.
            ignore: (B, G) bool.
            reusable: (B, G) bool.
            extent: :func:`~lucid_yolo.train.metrics.coco_matching.match_extent` of the batch,
                read to the host.
        """
        return match_padded(self._replayed, overlaps, ignore, reusable, extent)

    def _replayed(self, *args: Tensor | int) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            return cast(tuple[Tensor, Tensor], self._recorder(*args))


def match_padded(
    region: Callable[..., tuple[Tensor, Tensor]],
    overlaps: Tensor,
    ignore: Tensor,
    reusable: Tensor,
    extent: Sequence[int],
) -> tuple[Tensor, Tensor]:
    """The batch matched by ``region`` (:class:`MatchingRegion` or its replay) with its rows and
    columns padded and its extent raised to powers of two, its padded rows cut off again.

    A batch with nothing within reach is matched eagerly: two zero tensors, no rounds.
    """
    rounds, rows, cols = (int(v) for v in extent)
    if rows == 0 or cols == 0:
        return match_batch(overlaps, ignore, reusable, extent=(rounds, rows, cols))
    padded, ignore, reusable = pad_to_powers_of_two(overlaps, ignore, reusable)
    D, G = padded.shape[1:]
    matched, ignored = region(
        padded,
        ignore,
        reusable,
        power_of_two(rounds),
        min(power_of_two(rows), D),
        min(power_of_two(cols), G),
    )
    kept = overlaps.shape[1]
    return matched[..., :kept], ignored[..., :kept]


def power_of_two(count: int) -> int:
    """The smallest power of two at least ``count`` (1 for 0)."""
    return 1 << max(count - 1, 0).bit_length()


def pad_to_powers_of_two(
    overlaps: Tensor, ignore: Tensor, reusable: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The batch with its rows and columns padded to powers of two: overlaps -1, flags off."""
    D, G = overlaps.shape[1:]
    extra_rows, extra_cols = power_of_two(D) - D, power_of_two(G) - G
    if extra_rows == 0 and extra_cols == 0:
        return overlaps, ignore, reusable
    return (
        F.pad(overlaps, (0, extra_cols, 0, extra_rows), value=-1.0),
        F.pad(ignore, (0, extra_cols), value=0),
        F.pad(reusable, (0, extra_cols), value=0),
    )


__all__ = [
    "MAX_SIGNATURES",
    "MatchReplay",
    "MatchingRegion",
    "match_padded",
    "pad_to_powers_of_two",
    "power_of_two",
]
