"""The trainer's runtime verifier on the CPU stand-in: shadow native steps, retire on a difference.

The stand-in replays through the same bookkeeping as CUDA graphs, so a replayed fit equals a
native one here; a difference is injected by corrupting the replayed backward's gradients.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lucid_yolo.replay import ReplayRetiredWarning, RetireReason, first_difference
from lucid_yolo.replay._graphs import RegionGraphs
from lucid_yolo.train import ReplayConfig

pytestmark = pytest.mark.filterwarnings(
    "ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"
)

CPU_FIT = {"accelerator": "cpu", "imgsz": 64, "max_steps": 4}
VERIFIED_NETWORK = ReplayConfig(network=True, verify_every=1)


@pytest.mark.slow
def test_step_verifier_shadows_every_step_after_the_first_and_changes_nothing(
    tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    yaml = tiny_dataset("detect")
    native = fit_digests(yaml, "detect", "32-true", 2, **CPU_FIT)
    verified = fit_digests(yaml, "detect", "32-true", 2, replay=VERIFIED_NETWORK, **CPU_FIT)
    assert verified.telemetry["verified"] == 3
    assert verified.telemetry["parity_mismatches"] == 0
    # every micro-batch after the warm-up one replays; the shadow re-runs each verified step's
    # two micro-batches with the recorder off
    assert verified.regions["network"]["replays"] == len(verified.losses) - 1
    assert verified.regions["network"]["native.disabled"] == 3 * 2
    assert first_difference(native.digests, verified.digests) is None
    assert native.losses == verified.losses


@pytest.mark.slow
def test_step_verifier_shadows_the_network_with_its_loss_as_one_region(
    tiny_dataset: Callable[[str], Path],
    fit_digests: Callable[..., Any],
    shared_fit: Callable[..., Any],
) -> None:
    # the shadow step turns the one region off and runs the network and the loss natively
    yaml = tiny_dataset("detect")
    replay = ReplayConfig(network=True, loss=True, loss_with_network=True, verify_every=1)
    native = shared_fit(yaml, "detect", "32-true", 1, **CPU_FIT)
    verified = fit_digests(yaml, "detect", "32-true", 1, replay=replay, **CPU_FIT)
    assert verified.telemetry["verified"] == 3
    assert verified.telemetry["parity_mismatches"] == 0
    assert verified.telemetry["retirements"] == 0
    assert verified.regions["network+loss"]["replays"] == len(verified.losses) - 1
    assert verified.regions["network+loss"]["native.disabled"] == 3
    assert first_difference(native.digests, verified.digests) is None
    assert native.losses == verified.losses


@pytest.mark.slow
def test_step_verifier_retires_on_injected_difference_and_keeps_native_result(
    tiny_dataset: Callable[[str], Path],
    fit_digests: Callable[..., Any],
    shared_fit: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    yaml = tiny_dataset("detect")
    native = shared_fit(yaml, "detect", "32-true", 1, **CPU_FIT)
    original = RegionGraphs.launch_backward

    def corrupted(self: RegionGraphs, pattern: frozenset[str]) -> None:
        original(self, pattern)
        next(g for g in self.static_grads[pattern] if g is not None).add_(1.0)

    monkeypatch.setattr(RegionGraphs, "launch_backward", corrupted)
    with pytest.warns(ReplayRetiredWarning, match=r"parity-mismatch.*differs after step 2"):
        fit = fit_digests(yaml, "detect", "32-true", 1, replay=VERIFIED_NETWORK, **CPU_FIT)
    telemetry = fit.module.replay_telemetry
    assert telemetry.parity_mismatches == 1
    assert telemetry.mismatch_step == 2
    assert telemetry.mismatch_key.startswith("model.")
    assert fit.telemetry["mismatch_step"] == 2
    network = fit.module.replay.network
    assert network.retired is not None
    assert network.retired.reason is RetireReason.PARITY_MISMATCH
    assert first_difference(native.digests, fit.digests) is None
