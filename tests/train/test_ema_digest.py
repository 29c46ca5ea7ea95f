"""The trainer's EMA, bit for bit: digests of a short CPU fit recorded before EMA was unified.

The expected value was recorded on the code before ``lucid_yolo.train.optim.ModelEMA`` and
``lucid_yolo.replay.ModelEMA`` became one implementation (commit "EMA digest recorded"), with one
intra-op thread, on this repository's locked torch on an x86-64 CPU. A change to any kernel a fit
runs (a torch upgrade, another CPU's vector unit) can change the bits with no change to the EMA:
then record it again on unchanged code first (``git log -- tests/train/test_ema_digest.py``). A
new CPU adds its value beside the others (``EXPECTED_FIT``); a change of the code replaces them
all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lucid_yolo.models.cpu_threads import one_cpu_thread
from lucid_yolo.train.optim import PADDED_FLOP_RATIOS

pytestmark = pytest.mark.filterwarnings(
    "ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"
)

EXPECTED_FIT = {
    "the CPU of sessions up to 10, and CI's": (
        "48c712d9644f0e0b6c89bd7ad52d901bb6329583fdd0836c3a2432dac78766f9"
    ),
    "AVX2 (AMD EPYC, 2026-12-01)": (
        "450955f5fe653ac94bb290d44435ead1c5a5a45bf365d91dd48e2fd0d51d7f14"
    ),
    "AVX-512 with AMX (Intel Xeon, 2026-12-06)": (
        "65247ec626c565010fc0b9c90d37b55acd239f317aca48dacb22ca787ef77d1f"
    ),
}
"""The value on each CPU it was recorded on: the same code gives other bits where the vector unit
differs (the AVX2 value was recorded on `3c271ef`, whose fit the first value passed on CI; the
AVX-512 one on `881d6a1`, whose fit code is `5d8215e`'s, which passed CI with the first value).

SHA-256 over the EMA weights, the EMA update count, the model and optimizer digests and the loss
bits of a 4-step native detect fit at 64 px (accumulation 2: 8 micro-batches), unclipped (the
gradient clip came later). Recorded again,
still on the EMA code before the unification, when the attention started scaling ``q`` before
``QᵀK`` (issue 14): the old order still gave the first value (c543758d…) on that code. Recorded
again when every head output got its own conv (issue 14, pose as two convs): the state-dict keys
and module reprs in the digests changed, and the box and class biases' gradients come out of a
conv backward whose incoming gradient has other strides (no split node any more), so three bias
momentum buffers differ in the last bits after the first step (faac78bd… before; weights, outputs
and weight gradients of a fresh network were checked equal under the old and new code).
Recorded again when MuSGD began orthogonalising zero-padded stacks of several shapes (session 7,
docs/engineering/musgd-ema.md): the padded products round differently (acc72786… before, on the
code just before that change; 3 MuSGD steps of yolo26n then differ by at most 6e-8 in 38 of 366
weights). And again when the Newton–Schulz scalings were fused into the products (``baddbmm``,
the same session: 00371102… before). Since session 39 MuSGD pads no CPU matrix by default
(``PADDED_FLOP_RATIOS``, docs/engineering/suite-time.md): the test keeps the padded CPU stacks
these values were recorded with, so that every recorded CPU's value stays valid."""


@pytest.fixture
def one_thread() -> Iterator[None]:
    with one_cpu_thread():
        yield


@pytest.fixture
def padded_cpu_stacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PADDED_FLOP_RATIOS, "cpu", 2.0)


def _fingerprint(fit: Any) -> str:
    # The fits' digests took in the learning-rate schedule after this value was recorded.
    digests = {k: v for k, v in fit.digests.items() if not k.startswith("scheduler.")}
    record = {"digests": digests, "ema_updates": fit.ema_updates, "losses": fit.losses}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


@pytest.mark.usefixtures("one_thread", "padded_cpu_stacks")
def test_trainer_ema_digest_is_unchanged(
    tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    fit = fit_digests(
        tiny_dataset("detect"),
        "detect",
        "32-true",
        2,
        accelerator="cpu",
        imgsz=64,
        max_steps=4,
        grad_clip_norm=0.0,
    )
    assert fit.ema_updates == 4
    fingerprint = _fingerprint(fit)
    assert fingerprint in EXPECTED_FIT.values(), (
        f"{fingerprint} is none of the recorded values {EXPECTED_FIT}; on a CPU not listed, "
        f"record it on unchanged code first (module docstring)"
    )
