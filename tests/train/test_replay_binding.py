"""The network's replay regions: groups cover every output, CPU bookkeeping equals native.

What the CPU comparisons prove: the CPU stand-in re-runs each recorded body eagerly, so the
kernels are the same on both sides and only the replay's bookkeeping can differ: static buffers,
copy-in, gradient routing and accumulation, output rebuilding, pool order. That is what they pin
(a replay that skips the copy-in of the incoming gradients fails
``test_network_replay_cpu_bookkeeping_matches_native_gradients``). They prove nothing about CUDA
graph kernels or autocast casts inside a graph: the ``gpu`` tests in ``test_replay_parity.py``
and ``tools/parity_matrix.py`` do.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from lucid_yolo.models import create_model
from lucid_yolo.models.registry import TASK_SUFFIXES
from lucid_yolo.replay import ReplayRetiredWarning, first_difference, grads_of, state_digest
from lucid_yolo.train.replay_binding import (
    FEATURE_KEYS,
    NetworkRegion,
    NetworkReplay,
    ReplayOptions,
    SegmentHeadRegion,
)

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


def test_segment_heads_option_needs_a_segment_model() -> None:
    net = create_model("yolo26n", num_classes=3)
    with pytest.raises(ValueError, match="needs a segment model"):
        NetworkReplay(net, "detect", ReplayOptions(capture_segment_heads=True))


def test_replay_options_reject_zero_signatures() -> None:
    with pytest.raises(ValueError, match="max_signatures must be >= 1"):
        ReplayOptions(max_signatures=0)


def test_network_replay_off_is_the_plain_forward() -> None:
    net = create_model("yolo26n", num_classes=3)
    replay = NetworkReplay(net, "detect", ReplayOptions())
    images = torch.rand(1, 3, 64, 64)
    assert not replay.enabled
    assert replay.telemetry.as_dict()["replays"] == 0
    expected = net(images)
    for key, value in replay(images).items():
        assert torch.equal(value, expected[key]), key


def test_network_replay_cpu_bookkeeping_matches_native_gradients() -> None:
    net = create_model("yolo26n", num_classes=3)
    reference = copy.deepcopy(net)
    replay = NetworkReplay(net, "detect", ReplayOptions(capture_network=True))
    for step in range(3):
        images = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(step))
        for model, forward in ((reference, reference), (net, replay)):
            model.zero_grad(set_to_none=True)
            outputs = forward(images)
            sum(v.float().square().mean() for v in outputs.values()).backward()  # type: ignore[union-attr]
        assert (
            first_difference(
                state_digest([net, grads_of(net)]), state_digest([reference, grads_of(reference)])
            )
            is None
        ), step
    telemetry = replay.telemetry.as_dict()
    # The first call is the native warm-up; the other two replay, on new images each.
    assert telemetry["native.warm-up"] == 1
    assert telemetry["replays"] == 2
    assert telemetry["retirements"] == 0


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
@pytest.mark.parametrize("task", ["detect"])
def test_loss_region_cpu_fit_equals_native(
    task: str, tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    yaml = tiny_dataset(task)
    cpu = {"accelerator": "cpu", "imgsz": 64, "max_steps": 4}
    native = fit_digests(yaml, task, "32-true", 1, **cpu)
    replayed = fit_digests(yaml, task, "32-true", 1, capture_network=True, capture_loss=True, **cpu)
    assert {name: t["replays"] for name, t in replayed.regions.items()} == {
        "network": 3,
        "loss": 3,
    }
    assert replayed.telemetry["retirements"] == 0
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses


@pytest.mark.parametrize("task", ["segment", "pose", "obb"])
def test_loss_region_refused_where_not_verified(task: str) -> None:
    suffix = TASK_SUFFIXES[task]
    net = create_model(f"yolo26n{suffix}", num_classes=2)
    expected = f"verified bitwise for \\('detect',\\) only, not '{task}'"
    with pytest.raises(ValueError, match=expected):
        NetworkReplay(net, task, ReplayOptions(capture_loss=True), torch.nn.Identity())


class _SumLoss(torch.nn.Module):
    """A loss over whatever outputs it gets, to change the loss region's input keys."""

    def forward(
        self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], fraction: Any
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        total = sum(v.sum() for v in outputs.values()) * fraction + batch["x"].sum()
        return total, {"sum": total.detach()}  # type: ignore[union-attr]


def test_loss_region_with_changed_keys_runs_natively_with_a_reason() -> None:
    net = create_model("yolo26n", num_classes=3)
    replay = NetworkReplay(net, "detect", ReplayOptions(capture_loss=True), _SumLoss())
    batch: Any = {"x": torch.ones(2)}
    fraction = torch.tensor(0.5)
    replay.loss({"a": torch.ones(2, requires_grad=True)}, batch, fraction)
    changed = {"a": torch.ones(2, requires_grad=True), "b": torch.ones(2, requires_grad=True)}
    with pytest.warns(ReplayRetiredWarning, match=r"inputs-changed.*\('a', 'b'\)"):
        total, _ = replay.loss(changed, batch, fraction)
    assert float(total.detach()) == 4.0
    telemetry = replay.telemetry.as_dict()
    assert telemetry["native.inputs-changed"] == 1
    assert telemetry["retired.inputs-changed"] == 1
