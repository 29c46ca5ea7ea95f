"""gather_across_ranks: a two-rank evaluation scores like one process over the same images."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gloo_ranks import run_ranks
from metric_ranks import KINDS, scene, shard_metrics, shard_metrics_runs

from lucid_yolo.train.metrics import MeanAveragePrecision, gather_across_ranks


def _one_process() -> dict[str, float]:
    preds, targets = scene()
    metric = MeanAveragePrecision(kinds=KINDS)
    metric.update(preds, targets, image_ids=list(range(len(preds))))
    return metric.compute()


def test_gather_across_ranks_without_a_process_group_is_the_metric_itself() -> None:
    metric = MeanAveragePrecision()
    assert gather_across_ranks(metric) is metric


PADDINGS = [False, True]


@pytest.fixture(scope="module")
def gloo_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, list[dict[str, float]]]:
    """Each rank's gathered metrics by ``padded``, both runs in one pair of spawned gloo ranks."""
    ranks = run_ranks(shard_metrics_runs, 2, tmp_path_factory.mktemp("gloo"), PADDINGS)
    return {padded: [rank[index] for rank in ranks] for index, padded in enumerate(PADDINGS)}


@pytest.mark.slow
@pytest.mark.parametrize("padded", PADDINGS, ids=["shards", "padded-shards"])
def test_gather_across_ranks_two_gloo_ranks_equal_one_process(
    gloo_ranks: dict[bool, list[dict[str, float]]], padded: bool
) -> None:
    expected = _one_process()
    ranks = gloo_ranks[padded]
    assert ranks[0] == ranks[1] == expected
    assert {name.split("/")[0] for name in expected} == set(KINDS)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_gather_across_ranks_two_nccl_ranks_equal_one_process(tmp_path: Path) -> None:
    expected = _one_process()
    ranks = run_ranks(shard_metrics, 2, tmp_path, False, backend="nccl")
    assert ranks[0] == ranks[1] == expected


def test_gather_across_ranks_scene_is_sensitive_to_image_order() -> None:
    preds, targets = scene()
    interleaved = MeanAveragePrecision(kinds=KINDS)
    order = [*range(0, len(preds), 2), *range(1, len(preds), 2)]
    interleaved.update([preds[i] for i in order], [targets[i] for i in order])
    assert interleaved.compute() != _one_process()
