"""A validation batch's scoring replayed from CUDA graphs, one per signature.

Between the evaluation forward and the matching, a box, keypoint or rotated-box batch goes
through a fixed chain of tensor operators of static shape: the deployed path's top-k, the
letterbox undone for predictions and targets, COCO's order, the rank within each class, the
overlaps, the pairs that can match and the matching's extent (a batch of 4 at 640 px on the
device's path: 198 operators for boxes, 348 with keypoints, 641 for rotated boxes; issue 11,
session 33, ``tools/bench_metric_update.py``). A mask batch's chain stops before the masks,
which need each image's size on the host: the top-k, the source pixels, the rows that can pair
and the sizes to copy (108 operators). Each is a kernel the host launches; replayed,
the chain is the static inputs' copies, one launch and the copies of what the metric keeps.

The scoring is a function of named tensors and scalars (the network's outputs, the batch's
target fields, the input size); a region takes positional tensors and scalars, so the names
travel as one ``str`` argument, which the signature keys like any scalar. Its outputs are cloned
(``clone_outputs``), which correctness needs: the metric keeps them across batches while the
next replay rewrites the graph's own, and some of them are one tensor under several names or
a static input itself (the batch's int64 classes pass through as the targets' classes). The
graphs live in a pool of their own, beside the training step's, as the matching's do
(:class:`~lucid_yolo.train.metrics.match_replay.MatchReplay`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import cast

import torch
from torch import Tensor

from lucid_yolo.replay import ForwardRecorder, ReplayPool, Telemetry

ScoringValue = Tensor | int | float
"""What the scoring reads: tensors, and scalars such as the input size."""

Scoring = Callable[[Mapping[str, ScoringValue]], dict[str, Tensor]]
"""A batch's scoring: named inputs to named outputs, pure (it keeps nothing)."""

MAX_SIGNATURES = 8
"""Scoring graphs recorded per device: a validation set has one batch shape and a smaller last
batch (the evaluator scores with autocast off, and fixes its confidence cut and top-k), so a few
serve a run; a further signature runs eagerly."""

_SEPARATOR = "\n"


class ScoringRegion:
    """A scoring as a region: the names joined in one ``str``, then the values in that order."""

    def __init__(self, scoring: Scoring) -> None:
        self.scoring = scoring

    def __call__(self, names: str, *values: ScoringValue) -> dict[str, Tensor]:
        return self.scoring(dict(zip(names.split(_SEPARATOR), values, strict=True)))

    def region_modules(self) -> Sequence[torch.nn.Module]:
        """None: the scoring reads no parameter or buffer."""
        return ()


class ScoringReplay:
    """``scoring(inputs)``, the same bits, replayed on a CUDA device.

    The first call of a signature runs eagerly, the second records, later ones replay
    (:class:`~lucid_yolo.replay.ForwardRecorder`); a call with gradients on runs eagerly.

    Args:
        scoring: the batch's scoring; it must not wait for the device nor read a tensor on
            the host (a capture would fail, and the recorder would run it eagerly from then
            on, with a warning).
        device: the CUDA device the inputs are on.
        max_signatures: graphs recorded at most.
    """

    def __init__(
        self, scoring: Scoring, device: torch.device, max_signatures: int = MAX_SIGNATURES
    ) -> None:
        self._recorder = ForwardRecorder(
            ScoringRegion(scoring),
            name="evaluation scoring",
            warmup_steps=1,
            max_signatures=max_signatures,
            pool=ReplayPool(device),
            clone_outputs=True,
        )

    @property
    def telemetry(self) -> Telemetry:
        """The recorder's counters: recordings, replays, native calls and why."""
        return self._recorder.telemetry

    def __call__(self, inputs: Mapping[str, ScoringValue]) -> dict[str, Tensor]:
        """The scoring of ``inputs``, whose names hold no line break (output and batch keys)."""
        return cast(dict[str, Tensor], self._recorder(_SEPARATOR.join(inputs), *inputs.values()))


__all__ = ["MAX_SIGNATURES", "Scoring", "ScoringRegion", "ScoringReplay", "ScoringValue"]
