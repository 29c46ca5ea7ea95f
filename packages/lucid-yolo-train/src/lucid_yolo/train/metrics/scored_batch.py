"""A batch scored and not yet matched: tensors only, so that a CUDA graph can produce it.

Scoring a padded batch (ordering each image's predictions, ranking them within their class,
the overlap matrices, the pairs that can match, the matching's extent) is a fixed chain of some
hundred operators on tensors of static shape. Launched one by one, they are most of a GPU
validation batch's host time (issue 11); as the output of a region they replay from one graph
(:class:`~lucid_yolo.train.scoring_replay.ScoringReplay`). A region returns a flat mapping of
tensors, so the scored batch travels as one (:meth:`ScoredBatch.as_tensors`) and is rebuilt on
the other side (:meth:`ScoredBatch.from_tensors`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from torch import Tensor

from lucid_yolo.train.metrics.image_instances import MetricsInputError


@dataclass(frozen=True)
class ScoredKind:
    """One kind of one batch, scored: B images, D prediction rows, G target rows each.

    Attributes:
        overlaps: (B, D, G) float64 along the matching order, -1 for pairs that never match.
        ignore: (B, G) bool, targets that do not count.
        reusable: (B, G) bool, targets any number of predictions may match (crowds).
        scores: (B, D) float64, descending within each image.
        classes: (B, D) int64.
        kept: (B, D) bool, real predictions within ``max_dets`` per class.
        target_classes: (B, G) int64.
        counted: (B, G) bool, real targets that are not ignored.
        extent: (3,) int64, :func:`~lucid_yolo.train.metrics.coco_matching.match_extent`.
    """

    overlaps: Tensor
    ignore: Tensor
    reusable: Tensor
    scores: Tensor
    classes: Tensor
    kept: Tensor
    target_classes: Tensor
    counted: Tensor
    extent: Tensor


_KIND_FIELDS = tuple(f.name for f in fields(ScoredKind))


@dataclass(frozen=True)
class ScoredBatch:
    """Every kind of one batch, scored.

    Attributes:
        kinds: per metric kind, its scored tensors.
        lowest_classes: (2,) int64, the lowest class id among real predictions and among
            real targets (negative ids are an input error, checked where the host may read).
    """

    kinds: dict[str, ScoredKind]
    lowest_classes: Tensor

    def as_tensors(self) -> dict[str, Tensor]:
        """Every tensor under a name ``<kind>/<field>`` (and ``lowest_classes``)."""
        flat = {"lowest_classes": self.lowest_classes}
        for kind, scored in self.kinds.items():
            flat.update({f"{kind}/{name}": getattr(scored, name) for name in _KIND_FIELDS})
        return flat

    @classmethod
    def from_tensors(cls, flat: Mapping[str, Tensor]) -> ScoredBatch:
        """The scored batch :meth:`as_tensors` flattened.

        Raises:
            MetricsInputError: a kind lacks a field, or a name is of neither form.
        """
        grouped: dict[str, dict[str, Tensor]] = {}
        for name, tensor in flat.items():
            if name == "lowest_classes":
                continue
            kind, _, field = name.partition("/")
            if field not in _KIND_FIELDS:
                raise MetricsInputError(
                    f"scored batch tensor {name!r} is not '<kind>/<field>' with a field of "
                    f"{_KIND_FIELDS!r}: pass what ScoredBatch.as_tensors returned"
                )
            grouped.setdefault(kind, {})[field] = tensor
        missing = {k: sorted(set(_KIND_FIELDS) - set(v)) for k, v in grouped.items()}
        missing = {k: v for k, v in missing.items() if v}
        if missing or "lowest_classes" not in flat:
            raise MetricsInputError(
                f"scored batch lacks {missing or 'lowest_classes'!r}: pass what "
                "ScoredBatch.as_tensors returned"
            )
        kinds = {kind: ScoredKind(**values) for kind, values in grouped.items()}
        return cls(kinds, flat["lowest_classes"])


__all__ = ["ScoredBatch", "ScoredKind"]
