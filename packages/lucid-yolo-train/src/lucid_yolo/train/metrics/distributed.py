"""Gathering an accumulator from every process of a distributed evaluation.

Under data-parallel validation each rank scores its own shard of the images, and mAP is not an
average of per-shard mAPs: precision is accumulated over the whole set, ordered by score. So the
per-image records themselves travel: every rank sends its accumulator to every other
(``all_gather_object``: pickled, any backend), and each merges them. Records carry their image's
dataset index, so the merged accumulator scores the images in dataset order and counts an image
once even when a padding sampler gave it to two ranks: the result is the one process would
compute over the same images (issue 16).
"""

from __future__ import annotations

import torch.distributed as dist

from lucid_yolo.train.metrics.mean_average_precision import MeanAveragePrecision


def gather_across_ranks(metric: MeanAveragePrecision) -> MeanAveragePrecision:
    """Every rank's records merged, the same on every rank.

    A collective: every rank of the default process group must call it, in the same order as
    its other collectives. Without an initialised group of two or more ranks it returns
    ``metric`` itself.

    Args:
        metric: this rank's accumulator (left unchanged).

    Returns:
        A new accumulator holding the records of ranks 0, 1, … in that order.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return metric
    parts: list[MeanAveragePrecision | None] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, metric.cpu())  # records leave the device to be pickled
    # every entry is an unpickled copy, this rank's own included, so merging into it is safe
    merged, *others = (part for part in parts if part is not None)
    for other in others:
        merged.merge(other)
    return merged


__all__ = ["gather_across_ranks"]
