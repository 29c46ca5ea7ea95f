"""A replayed fit is bitwise equal to a native fit (CUDA only).

Two fits with the same seed, one with the network region(s) and/or the update (MuSGD + EMA)
replayed from CUDA graphs: digests of the model, EMA, optimizer and GradScaler state and every
per-step loss must be identical. The fits clip gradients at the module's default norm (10)
and run in its default layout (``memory_format="auto"``: channels-last on CUDA) unless a test
says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from lucid_yolo.replay import first_difference
from lucid_yolo.train import ReplayConfig

pytestmark = [
    pytest.mark.gpu,
    # Lightning's advice on loader workers and logging intervals for a deliberately tiny fit.
    pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"),
]


_ONE_REGION = ReplayConfig(network=True, loss=True, update=True)
"""Every part of the step replayed, the network and its loss as one region (the default)."""


@pytest.mark.parametrize(
    ("task", "precision", "accumulate", "replay"),
    [
        ("detect", "32-true", 1, ReplayConfig(network=True)),
        ("detect", "bf16-mixed", 1, ReplayConfig(network=True)),
        ("detect", "16-mixed", 1, ReplayConfig(network=True)),
        ("detect", "bf16-mixed", 2, ReplayConfig(network=True)),
        ("segment", "bf16-mixed", 1, ReplayConfig(network=True, segment_heads=True)),
        ("detect", "32-true", 1, ReplayConfig(network=True, update=True)),
        ("detect", "bf16-mixed", 2, ReplayConfig(network=True, update=True)),
        (
            "segment",
            "bf16-mixed",
            1,
            ReplayConfig(network=True, segment_heads=True, update=True),
        ),
        (
            "detect",
            "bf16-mixed",
            2,
            ReplayConfig(network=True, loss=True, loss_with_network=False, update=True),
        ),
        # fp16's GradScaler skips this short fit's updates (no update to count), as above
        ("detect", "16-mixed", 1, ReplayConfig(network=True, loss=True)),
        *(
            (task, precision, accumulate, _ONE_REGION)
            for task, precision, accumulate in (
                ("detect", "bf16-mixed", 2),
                ("segment", "bf16-mixed", 1),
                ("pose", "bf16-mixed", 2),
                ("obb", "32-true", 1),
            )
        ),
    ],
)
def test_replayed_fit_is_bitwise_native(
    task: str,
    precision: str,
    accumulate: int,
    replay: ReplayConfig,
    tiny_dataset: Callable[[str], Path],
    fit_digests: Callable[..., Any],
) -> None:
    yaml = tiny_dataset(task)
    native = fit_digests(yaml, task, precision, accumulate)
    replayed = fit_digests(yaml, task, precision, accumulate, replay=replay)
    micro_batches = len(replayed.losses)
    expected = {
        "network": micro_batches - 1,
        "segment-heads": micro_batches - 1,
        "loss": micro_batches - 1,
        "optimizer MuSGD": replayed.ema_updates - 1,
    }
    names = {
        "network": "network",
        "segment_heads": "segment-heads",
        "loss": "loss",
        "update": "optimizer MuSGD",
    }
    regions = {name for option, name in names.items() if getattr(replay, option)}
    if replay.joins_network_and_loss:
        regions = regions - {"network", "loss"} | {"network+loss"}
        expected["network+loss"] = micro_batches - 1
    assert set(replayed.regions) == regions
    for name in regions:
        assert replayed.regions[name]["replays"] == expected[name], (name, replayed.regions)
    assert replayed.telemetry["retirements"] == 0, replayed.telemetry
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses


@pytest.mark.parametrize(
    ("task", "precision", "replay"),
    [
        ("detect", "bf16-mixed", ReplayConfig(network=True, loss=True, update=True)),
        (
            "segment",
            "bf16-mixed",
            ReplayConfig(network=True, segment_heads=True, loss=True, update=True),
        ),
        (
            "segment",
            "32-true",
            ReplayConfig(network=True, segment_heads=True, loss=True, update=True),
        ),
        ("segment", "bf16-mixed", ReplayConfig(network=True, loss=True, update=True)),
    ],
)
def test_replayed_fit_validates_in_the_pool_with_the_native_metrics(
    task: str,
    precision: str,
    replay: ReplayConfig,
    tiny_dataset: Callable[[str], Path],
    fit_digests: Callable[..., Any],
) -> None:
    # 8 training images at batch 4: three epochs, each validated in two batches of 2. The sanity
    # check runs before any graph exists, so it borrows nothing; the six forwards after it do.
    # The forwards' outputs are compared as well as the metrics, which a fit this short leaves
    # near zero. In fp32 a segment batch's prototypes stay the forward's own tensor while the
    # batch waits for its sizes, across the pass's next borrowed forward. Segment's metric also
    # builds each batch's masks in the loan: six more blocks.
    yaml = tiny_dataset(task)
    native = fit_digests(yaml, task, precision, 1, validate=True)
    replayed = fit_digests(yaml, task, precision, 1, replay=replay, validate=True)
    loan = replayed.module.replay.evaluation_loan
    native_loan = native.module.replay.evaluation_loan
    assert loan is not None
    assert native_loan is not None
    assert (loan.borrowed, native_loan.borrowed) == (6 + _MASK_BLOCKS[task], 0)
    assert not loan.lending
    assert replayed.network_replays == len(replayed.losses) - 1
    _assert_same_validation_and_training(native, replayed)


_MASK_BLOCKS = {"detect": 0, "segment": 3 * 2, "pose": 0, "obb": 0}
"""Borrowing blocks of the metric's masks in a digested fit's passes after the sanity check:
one a batch, three passes of two."""


def _assert_same_validation_and_training(native: Any, replayed: Any) -> None:
    """Every evaluation forward's outputs (the sanity check's two, then three passes of two),
    each pass's metrics, the training state and the losses of two digested fits are equal, and
    the replayed fit retired nothing."""
    assert replayed.telemetry["retirements"] == 0, replayed.telemetry
    assert len(native.val_outputs) == 2 + 6
    assert replayed.val_outputs == native.val_outputs
    assert len(native.val) == 3
    assert replayed.val == native.val
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses


@pytest.mark.parametrize(
    ("task", "precision", "replay"),
    [
        (
            "detect",
            "bf16-mixed",
            ReplayConfig(network=True, loss=True, update=True, evaluation=True),
        ),
        (
            "segment",
            "bf16-mixed",
            ReplayConfig(network=True, segment_heads=True, loss=True, update=True, evaluation=True),
        ),
        (
            "segment",
            "32-true",
            ReplayConfig(network=True, segment_heads=True, loss=True, update=True, evaluation=True),
        ),
        (
            "segment",
            "bf16-mixed",
            ReplayConfig(network=True, loss=True, update=True, evaluation=True),
        ),
        ("detect", "bf16-mixed", ReplayConfig(evaluation=True, evaluate_in_pool=False)),
        ("pose", "bf16-mixed", ReplayConfig(network=True, loss=True, update=True, evaluation=True)),
        ("obb", "bf16-mixed", ReplayConfig(network=True, loss=True, update=True, evaluation=True)),
    ],
)
def test_replayed_evaluation_gives_the_native_outputs_and_metrics(
    task: str,
    precision: str,
    replay: ReplayConfig,
    tiny_dataset: Callable[[str], Path],
    fit_digests: Callable[..., Any],
) -> None:
    # The fit of the test above with the evaluation forward replayed. In the step's pool the
    # sanity check's two forwards run natively and the first forward after the training graphs
    # records in their scratch; in a pool of its own it records at the sanity check's first.
    # Every forward after the recording replays, each output equal to the native forward's.
    # In fp32 a segment batch's prototypes wait for their sizes across the next replay, which
    # rewrites the graph's outputs: the evaluator keeps its own copy. The metrics of so short a
    # fit are near zero; the outputs' digests carry the comparison. Segment's masks are built in
    # the pool's loan between the replays, unless the graphs have a pool of their own.
    yaml = tiny_dataset(task)
    native = fit_digests(yaml, task, precision, 1, validate=True)
    replayed = fit_digests(yaml, task, precision, 1, replay=replay, validate=True)
    recorder = replayed.module.replay.evaluation
    assert recorder is not None
    telemetry = recorder.telemetry.as_dict()
    in_pool = recorder.pool is replayed.module.replay.shared_pool(torch.device("cuda"))
    assert in_pool == replay.evaluate_in_pool
    sanity = 2 if in_pool and (replay.regions or replay.update) else 0
    assert (telemetry["recordings"], telemetry["replays"]) == (1, 8 - sanity), telemetry
    assert telemetry["native_calls"] == telemetry.get("native.warm-up", 0) == sanity, telemetry
    loan = replayed.module.replay.evaluation_loan  # only for masks, and only in the pool
    borrowed = None if loan is None else loan.borrowed
    lends = replay.evaluate_in_pool and task == "segment"
    assert borrowed == (_MASK_BLOCKS[task] if lends else None)
    _assert_same_validation_and_training(native, replayed)


def test_replayed_fit_in_the_default_layout_is_channels_last_and_bitwise_native(
    tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    yaml = tiny_dataset("detect")
    replay = ReplayConfig(network=True, loss=True, update=True)
    native = fit_digests(yaml, "detect", "bf16-mixed", 1)
    replayed = fit_digests(yaml, "detect", "bf16-mixed", 1, replay=replay)
    for fit in (native, replayed):
        assert fit.module.memory_format == torch.channels_last
        for net in (fit.module.net, fit.module.ema_net):
            weights = [p for p in net.parameters() if p.dim() == 4]
            assert all(p.is_contiguous(memory_format=torch.channels_last) for p in weights)
    assert replayed.network_replays == len(replayed.losses) - 1
    assert replayed.telemetry["retirements"] == 0, replayed.telemetry
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses


@pytest.mark.parametrize("grad_clip_norm", [10.0, 0.0])
@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-mixed"])
def test_replayed_fit_clipped_or_not_is_bitwise_native(
    precision: str,
    grad_clip_norm: float,
    tiny_dataset: Callable[[str], Path],
    fit_digests: Callable[..., Any],
) -> None:
    # The clip reduces every gradient to one norm after the replayed backward (fp16: after
    # GradScaler's unscale) and before the replayed update reads them; accumulation 2 clips the
    # sum. fp16 skips its first steps (inf gradients at the initial scale): enough steps that
    # clipped updates apply and replay.
    yaml = tiny_dataset("detect")
    options = {"grad_clip_norm": grad_clip_norm, "max_steps": 24 if precision == "16-mixed" else 6}
    replay = ReplayConfig(network=True, loss=True, update=True)
    native = fit_digests(yaml, "detect", precision, 2, **options)
    replayed = fit_digests(yaml, "detect", precision, 2, replay=replay, **options)
    assert native.ema_updates == replayed.ema_updates >= 3, replayed.telemetry
    assert replayed.network_replays == len(replayed.losses) - 1
    assert replayed.regions["optimizer MuSGD"]["replays"] == replayed.ema_updates - 1
    assert replayed.telemetry["retirements"] == 0, replayed.telemetry
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_replayed_segment_fit_in_channels_last_is_bitwise_native(
    precision: str, tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    # The parity matrix's 6 failing cases, smallest: the prototype head's outputs are
    # channels_last, the gradients the loss hands them are not.
    yaml = tiny_dataset("segment")
    replay = ReplayConfig(network=True, segment_heads=True)
    options: dict[str, Any] = {"max_steps": 3, "memory_format": "channels_last"}
    native = fit_digests(yaml, "segment", precision, 1, **options)
    replayed = fit_digests(yaml, "segment", precision, 1, replay=replay, **options)
    micro_batches = len(replayed.losses)
    assert {name: t["replays"] for name, t in replayed.regions.items()} == {
        "network": micro_batches - 1,
        "segment-heads": micro_batches - 1,
    }
    assert replayed.telemetry["retirements"] == 0, replayed.telemetry
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses


def test_replayed_update_under_grad_scaler_is_bitwise_native(
    tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    # GradScaler skips the first steps of a fresh fp16 run (inf gradients at the initial scale),
    # and a skipped step runs no update: enough steps that some updates apply and replay.
    yaml = tiny_dataset("detect")
    native = fit_digests(yaml, "detect", "16-mixed", 1, max_steps=24)
    replayed = fit_digests(
        yaml, "detect", "16-mixed", 1, max_steps=24, replay=ReplayConfig(update=True)
    )
    assert native.ema_updates == replayed.ema_updates >= 3, replayed.telemetry
    assert replayed.regions["optimizer MuSGD"]["replays"] == replayed.ema_updates - 1
    assert replayed.telemetry["retirements"] == 0, replayed.telemetry
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses


@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-mixed"])
def test_replayed_fit_with_verifier_finds_no_difference(
    precision: str, tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    yaml = tiny_dataset("detect")
    replay = ReplayConfig(network=True, loss=True, update=True, verify_every=2)
    native = fit_digests(yaml, "detect", precision, 2)
    verified = fit_digests(yaml, "detect", precision, 2, replay=replay)
    assert verified.telemetry["verified"] == 2, verified.telemetry
    assert verified.telemetry["parity_mismatches"] == 0, verified.telemetry
    assert verified.network_replays == len(verified.losses) - 1
    assert first_difference(native.digests, verified.digests) is None
    assert native.losses == verified.losses


@pytest.mark.parametrize(
    ("task", "accumulate", "memory_format"),
    [("segment", 2, "channels_last"), ("pose", 3, "channels_last"), ("detect", 2, "contiguous")],
)
def test_replayed_fit_with_loss_is_bitwise_native_under_bf16_accumulation(
    task: str,
    accumulate: int,
    memory_format: str,
    tiny_dataset: Callable[[str], Path],
    fit_digests: Callable[..., Any],
) -> None:
    # Segment under bf16 is the case whose mask product's backward once ran under autocast.
    yaml = tiny_dataset(task)
    replay = ReplayConfig(network=True, segment_heads=task == "segment", loss=True, update=True)
    options = {"max_steps": 3, "memory_format": memory_format}
    native = fit_digests(yaml, task, "bf16-mixed", accumulate, **options)
    replayed = fit_digests(yaml, task, "bf16-mixed", accumulate, replay=replay, **options)
    micro_batches = len(replayed.losses)
    if replay.joins_network_and_loss:
        expected = {"network+loss": micro_batches - 1}
    else:  # segment: its heads' region sits between the network and the loss
        expected = dict.fromkeys(("network", "segment-heads", "loss"), micro_batches - 1)
    expected["optimizer MuSGD"] = replayed.ema_updates - 1
    assert {name: t["replays"] for name, t in replayed.regions.items()} == expected
    assert replayed.telemetry["retirements"] == 0, replayed.telemetry
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses


@pytest.mark.parametrize(("task", "precision"), [("detect", "bf16-mixed"), ("segment", "32-true")])
def test_replayed_fit_with_float32_newton_schulz_is_bitwise_native(
    task: str, precision: str, tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    # On CUDA MuSGD orthogonalises in bfloat16 unless told otherwise, so every other row runs
    # bfloat16; this one names float32, whose replayed update must round every matrix update
    # as the native one does.
    yaml = tiny_dataset(task)
    replay = ReplayConfig(network=True, segment_heads=task == "segment", loss=True, update=True)
    options: dict[str, Any] = {"newton_schulz_dtype": "float32"}
    native = fit_digests(yaml, task, precision, 2, **options)
    replayed = fit_digests(yaml, task, precision, 2, replay=replay, **options)
    default = fit_digests(yaml, task, precision, 2, replay=replay)
    assert native.ema_updates == replayed.ema_updates >= 3, replayed.telemetry
    assert replayed.regions["optimizer MuSGD"]["replays"] == replayed.ema_updates - 1
    assert replayed.network_replays == len(replayed.losses) - 1
    assert replayed.telemetry["retirements"] == 0, replayed.telemetry
    assert first_difference(native.digests, replayed.digests) is None
    assert native.losses == replayed.losses
    # the default is not float32 on CUDA (test_musgd: it is bfloat16's bits)
    assert first_difference(default.digests, replayed.digests) is not None


@pytest.mark.parametrize("task", ["detect", "segment"])
def test_replayed_fit_with_the_weights_cast_together_is_bitwise_native(
    task: str, tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    # The casts made together (lucid_yolo.models.weight_casts) run inside the recorded regions
    # and the replayed evaluation; a fit with them must keep the bits of one without them.
    yaml = tiny_dataset(task)
    replay = ReplayConfig(network=True, segment_heads=task == "segment", loss=True, update=True)
    options: dict[str, Any] = {"casts_weights_together": True, "validate": True}
    native = fit_digests(yaml, task, "bf16-mixed", 2, **options)
    replayed = fit_digests(yaml, task, "bf16-mixed", 2, replay=replay, **options)
    autocast = fit_digests(yaml, task, "bf16-mixed", 2, validate=True, casts_weights_together=False)
    assert replayed.module.net.casts_weights_together
    assert replayed.module.ema_net.casts_weights_together
    assert not autocast.module.net.casts_weights_together
    assert replayed.network_replays == len(replayed.losses) - 1
    assert replayed.regions["optimizer MuSGD"]["replays"] == replayed.ema_updates - 1
    assert replayed.telemetry["retirements"] == 0, replayed.telemetry
    for other in (replayed, autocast):
        assert first_difference(native.digests, other.digests) is None
        assert native.losses == other.losses
        assert native.val == other.val
        assert native.val_outputs == other.val_outputs
