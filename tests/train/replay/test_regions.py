"""The replay regions run the network through its own forward parts and group every output.

These are eager CPU comparisons of a region with ``net(images)``: they prove the regions compute
the same tensors as the model's forward (same ops, same order), not anything about CUDA graphs.
"""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.models import create_model
from lucid_yolo.train.replay import FEATURE_KEYS, NetworkRegion, SegmentHeadRegion

MODELS = {
    "detect": "yolo26n",
    "segment": "yolo26n-seg",
    "pose": "yolo26n-pose",
    "obb": "yolo26n-obb",
}


@pytest.mark.parametrize("task", sorted(MODELS))
def test_network_region_groups_partition_the_outputs(task: str) -> None:
    net = create_model(MODELS[task], num_classes=3, kpt_shape=(4, 3))
    region = NetworkRegion(net)
    outputs = region(torch.rand(1, 3, 64, 64))
    grouped = [key for keys in region.prediction_groups().values() for key in keys]
    assert sorted(grouped) == sorted(outputs)
    assert len(grouped) == len(set(grouped))


def test_network_region_equals_the_network_forward() -> None:
    net = create_model("yolo26n-seg", num_classes=3)
    images = torch.rand(2, 3, 64, 64)
    expected = net(images)
    actual = NetworkRegion(net)(images)
    assert expected.keys() == actual.keys()
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key


def test_split_segment_regions_chain_to_the_network_forward() -> None:
    net = create_model("yolo26n-seg", num_classes=3)
    images = torch.rand(1, 3, 64, 64)
    expected = net(images)
    network = NetworkRegion(net, include_segment_heads=False)(images)
    features = [network.pop(k) for k in FEATURE_KEYS]
    network.update(SegmentHeadRegion(net)(*features))
    assert expected.keys() == network.keys()
    for key in expected:
        assert torch.equal(expected[key], network[key]), key
