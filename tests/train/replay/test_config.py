"""The one replay option group: checked on construction, summarised for the CLI."""

from __future__ import annotations

import pytest

from lucid_yolo.train import ReplayConfig, TrainConfigError, YoloModule


def test_replay_config_rejects_zero_signatures() -> None:
    with pytest.raises(TrainConfigError, match=r"replay.max_signatures must be >= 1, got 0"):
        ReplayConfig(max_signatures=0)


def test_replay_config_rejects_negative_verify_every() -> None:
    with pytest.raises(TrainConfigError, match=r"replay.verify_every must be >= 0 .* got -1"):
        ReplayConfig(verify_every=-1)


@pytest.mark.parametrize(
    "options", [{"network": True}, {"loss": True}, {}], ids=["no-loss", "no-network", "alone"]
)
def test_replay_config_refuses_loss_with_network_without_both_regions(
    options: dict[str, bool],
) -> None:
    with pytest.raises(TrainConfigError, match=r"turn on replay.network and replay.loss"):
        ReplayConfig(loss_with_network=True, **options)


def test_replay_config_refuses_loss_with_network_around_segment_heads() -> None:
    with pytest.raises(TrainConfigError, match=r"leave replay.segment_heads off"):
        ReplayConfig(network=True, segment_heads=True, loss=True, loss_with_network=True)


@pytest.mark.parametrize(
    ("options", "joined"),
    [
        ({"network": True, "loss": True}, True),
        ({"network": True, "loss": True, "update": True, "evaluation": True}, True),
        ({"network": True, "loss": True, "loss_with_network": False}, False),
        ({"network": True, "loss": True, "loss_with_network": True}, True),
        ({"network": True, "segment_heads": True, "loss": True}, False),
        ({"network": True, "update": True}, False),
        ({"loss": True}, False),
        ({}, False),
    ],
    ids=[
        "both",
        "everything",
        "chain",
        "insisted",
        "segment-heads",
        "no-loss",
        "no-network",
        "none",
    ],
)
def test_replay_config_joins_the_network_and_its_loss_by_default_where_both_replay(
    options: dict[str, bool], joined: bool
) -> None:
    assert ReplayConfig(**options).joins_network_and_loss is joined


def test_replay_config_graphs_counts_the_update_but_regions_do_not() -> None:
    update = ReplayConfig(update=True)
    assert (update.regions, update.graphs) == (False, True)
    assert ReplayConfig(segment_heads=True).regions
    assert not ReplayConfig(verify_every=3).graphs


def test_module_keeps_replay_out_of_the_hyperparameters() -> None:
    module = YoloModule("yolo26n", num_classes=2, replay=ReplayConfig(network=True))
    assert "replay" not in module.hparams
    assert module.replay.config.network


def test_replay_config_for_evaluation_keeps_only_the_evaluation_forward() -> None:
    asked = ReplayConfig(
        network=True,
        segment_heads=True,
        loss=True,
        update=True,
        evaluation=True,
        max_signatures=2,
        verify_every=3,
        evaluate_in_pool=False,
    )
    assert asked.for_evaluation() == ReplayConfig(evaluation=True, max_signatures=2)
    assert not ReplayConfig(network=True).for_evaluation().graphs
