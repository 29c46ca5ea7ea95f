"""The validation batch's scoring as a region, and its replay from CUDA graphs."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import torch
from torch import Tensor

from lucid_yolo.train.metrics import BatchPredictions, BatchTargets, MeanAveragePrecision
from lucid_yolo.train.scoring_replay import ScoringRegion, ScoringReplay, ScoringValue


def test_scoring_region_hands_the_scoring_its_named_inputs() -> None:
    seen: list[dict[str, ScoringValue]] = []

    def scoring(inputs: Mapping[str, ScoringValue]) -> dict[str, Tensor]:
        seen.append(dict(inputs))
        return {"sum": torch.zeros(())}

    region = ScoringRegion(scoring)
    scores = torch.ones(2)
    assert list(region("scores\nheight\nconf", scores, 64, 0.25)) == ["sum"]
    assert seen == [{"scores": scores, "height": 64, "conf": 0.25}]
    assert region.region_modules() == ()
    with pytest.raises(ValueError, match="shorter than argument 1"):  # a name per value
        region("scores\nheight", scores)


def _box_inputs(images: int, rows: int, targets: int, seed: int) -> dict[str, ScoringValue]:
    g = torch.Generator().manual_seed(seed)
    corners = torch.rand(images, rows, 2, generator=g) * 60
    boxes = torch.cat([corners, corners + 2 + torch.rand(images, rows, 2, generator=g) * 20], 2)
    return {
        "scores": torch.randint(1, 10, (images, rows), generator=g).float().cuda() / 10,
        "classes": torch.randint(0, 3, (images, rows), generator=g).cuda(),
        "valid": (torch.rand(images, rows, generator=g) < 0.8).cuda(),
        "boxes": (boxes + torch.randn(boxes.shape, generator=g)).cuda(),
        "target_classes": torch.randint(0, 3, (images, targets), generator=g).cuda(),
        "target_valid": (torch.rand(images, targets, generator=g) < 0.6).cuda(),
        "target_boxes": boxes[:, :targets].cuda(),
    }


@pytest.mark.gpu
def test_scoring_replay_of_the_metric_s_scoring_is_the_eager_scoring_bit_for_bit() -> None:
    # two shapes, each warmed up, recorded, then replayed; the replay's outputs are copies,
    # so a batch's survive the next batch's replay
    metric = MeanAveragePrecision(kinds=("box",), max_dets={"box": 5})

    def scoring(inputs: Mapping[str, ScoringValue]) -> dict[str, Tensor]:
        named = {k: v for k, v in inputs.items() if isinstance(v, Tensor)}
        predictions = BatchPredictions(
            scores=named["scores"],
            classes=named["classes"],
            valid=named["valid"],
            boxes=named["boxes"],
        )
        targets = BatchTargets(
            classes=named["target_classes"],
            valid=named["target_valid"],
            boxes=named["target_boxes"],
        )
        return metric.score_batch(predictions, targets).as_tensors()

    replay = ScoringReplay(scoring, torch.device("cuda"))
    kept: list[tuple[dict[str, Tensor], dict[str, Tensor]]] = []
    with torch.no_grad():
        for call in range(8):
            shape = (4, 32, 8) if call % 2 == 0 else (2, 32, 8)
            inputs = _box_inputs(*shape, seed=call)
            kept.append((replay(inputs), scoring(inputs)))
    for replayed, eager in kept:
        assert replayed.keys() == eager.keys()
        for name, tensor in eager.items():
            assert torch.equal(replayed[name], tensor), name
    assert int(kept[-1][1]["box/kept"].sum()) > 0
    telemetry = replay.telemetry.as_dict()
    # per shape: the first call eager, the second records and replays, the others replay
    assert (telemetry["native_calls"], telemetry["recordings"], telemetry["replays"]) == (2, 2, 6)
    assert telemetry["retirements"] == 0, telemetry
