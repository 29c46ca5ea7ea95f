"""A fit stopped by SIGTERM or SIGKILL, anywhere, resumes bit for bit from its ``last.ckpt``.

Each fit runs :mod:`resume_harness` in its own process: the uninterrupted fit (once per module
and device), a fit that sends itself the signal, and the fit resumed from the ``last.ckpt`` the
second one left. The resumed fit must run the same batches with the same loss bits and the same
draws from the global generators as the uninterrupted one from the step after the checkpoint on,
and end with the same digests of weights, EMA, optimizer, scheduler, scaler, random generators
and loader position. With 4 steps per epoch, step 4 ends epoch 0.

The processes are forked by a forkserver that imported the harness (torch, Lightning,
lucid-yolo) once, so a fit costs its training, not the seconds of those imports; nothing but the
imported modules passes from one fit to the next.
"""

from __future__ import annotations

import json
import multiprocessing
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import resume_harness
import torch

from lucid_yolo.train.callbacks.atomic_checkpoint_io import TEMP_SUFFIX
from lucid_yolo.train.data.synthetic import generate_synthetic

pytestmark = pytest.mark.slow

FORKSERVER = multiprocessing.get_context("forkserver")

Fit = dict[str, Any]


class Interruption(NamedTuple):
    """How a fit is stopped, the step of the ``last.ckpt`` it leaves, whether it cuts a save."""

    args: tuple[str, ...]
    checkpoint_step: int
    kills_a_save: bool = False


INTERRUPTIONS = {
    "sigterm-mid-epoch": Interruption(("--kill-at", "6", "--signal", "TERM"), 6),
    "sigkill-mid-epoch": Interruption(
        ("--kill-at", "5", "--signal", "KILL", "--every-n-steps", "3"), 3
    ),
    # saved at the end of the epoch's last batch, before its validation (Lightning skips that
    # validation on resume)
    "sigkill-epoch-end-before-validation": Interruption(
        ("--kill-at", "6", "--signal", "KILL", "--every-n-steps", "4"), 4
    ),
    # saved after the epoch's validation: the `last.ckpt` that `lucid-yolo fit` writes
    "sigkill-epoch-end-after-validation": Interruption(("--kill-at", "6", "--signal", "KILL"), 4),
    "sigterm-during-validation": Interruption(
        ("--kill-at", "4", "--signal", "TERM", "--during", "validation"), 4
    ),
    # the harness writes this case in the training thread (a background write would make the
    # signal's step depend on the writer's pace); sigkill-during-save cuts a background write
    "sigterm-during-save": Interruption(
        ("--kill-at", "3", "--signal", "TERM", "--during", "save", "--every-n-steps", "3"), 3
    ),
    "sigkill-during-save": Interruption(
        ("--kill-at", "6", "--signal", "KILL", "--during", "save", "--every-n-steps", "3"),
        3,
        kills_a_save=True,
    ),
    # as Slurm's scancel does: the loader workers get the signal too
    "sigterm-to-process-group-with-workers": Interruption(
        ("--kill-at", "6", "--signal", "TERM", "--to-group", "--workers", "2"), 6
    ),
}


def _fit(data: Path, root: Path, *args: str) -> tuple[int, Fit | None]:
    """Run the harness in a forked process; its exit code and result (None if it wrote none)."""
    out = root.with_suffix(".json")
    argv = [str(data), str(root), str(out), *args]
    process = FORKSERVER.Process(
        target=resume_harness.fit_in_own_session, args=(argv, str(root.with_suffix(".log")))
    )
    process.start()
    process.join(timeout=900)
    if process.exitcode is None:
        process.kill()
        process.join()
    assert process.exitcode is not None
    result = json.loads(out.read_text()) if out.is_file() else None
    return process.exitcode, result


NATIVE_CPU: tuple[str, ...] = ()
REPLAYED_BF16 = ("--accelerator", "gpu", "--replay")
REPLAYED_FP16 = (*REPLAYED_BF16, "--precision", "16-mixed")


PRELOAD = ["resume_harness", "lucid_yolo.train.callbacks"]
"""What the forkserver imports before it forks the first fit. The forkserver skips, silently, a
module it cannot import, and Python 3.11's does not put the test ``pythonpath`` on its
``sys.path``: there ``resume_harness`` is skipped, and ``lucid_yolo.train.callbacks`` (installed,
and all of the harness's import time: torch, Lightning, lucid-yolo) is what spares each fit its
imports (without it each fork spent 15 s importing at load 6)."""

PRELOADED = "import sys; sys.exit(0 if 'lucid_yolo.train.callbacks' in sys.modules else 1)"
"""A forked child's check, before it imports anything, that the forkserver preloaded lucid-yolo."""


@pytest.fixture(scope="module", autouse=True)
def forkserver_with_harness() -> None:
    """Have the forkserver import the harness before it forks the first fit; check it did."""
    FORKSERVER.set_forkserver_preload(PRELOAD)
    probe = FORKSERVER.Process(target=exec, args=(PRELOADED,))
    probe.start()
    probe.join()
    assert probe.exitcode == 0, "the forkserver did not preload lucid_yolo.train.callbacks"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("resume-data")
    return generate_synthetic(root, num_train=8, num_val=2, imgsz=64, seed=0)


@pytest.fixture(scope="module")
def uninterrupted(
    data: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[tuple[str, ...]], Future[Fit]]]:
    """The uninterrupted fit on a device (harness arguments), started once per module.

    It runs in the background, alongside the first test's interrupted fit, so a test costs two
    fits' time, not three (the GPU request runs each case in its own process).
    """
    fits: dict[tuple[str, ...], Future[Fit]] = {}

    def run(device: tuple[str, ...]) -> Fit:
        root = tmp_path_factory.mktemp("uninterrupted") / "full"
        code, result = _fit(data, root, *device)
        assert code == 0
        assert result is not None
        return result

    with ThreadPoolExecutor() as pool:

        def fit(device: tuple[str, ...]) -> Future[Fit]:
            if device not in fits:
                fits[device] = pool.submit(run, device)
            return fits[device]

        yield fit


def _interrupt(data: Path, tmp_path: Path, case: str, device: tuple[str, ...]) -> Path:
    """Run the fit that ``case`` stops; return its ``last.ckpt``, checked for the right step.

    A SIGKILL during a save leaves the previous ``last.ckpt`` whole beside the cut write (a
    hidden temporary file of at least the 1 MiB written before the kill, smaller than a whole
    checkpoint); no other case leaves a temporary file.
    """
    interruption = INTERRUPTIONS[case]
    code, killed = _fit(data, tmp_path / "killed", *interruption.args, *device)
    assert killed is None
    assert code == (-signal.SIGKILL if "sigkill" in case else 0)
    checkpoint = tmp_path / "killed" / "checkpoints" / "last.ckpt"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert saved["global_step"] == interruption.checkpoint_step
    partial = [path.stat().st_size for path in checkpoint.parent.glob(f".last.ckpt.*{TEMP_SUFFIX}")]
    assert len(partial) == interruption.kills_a_save
    assert all(1 << 20 <= size < checkpoint.stat().st_size for size in partial)
    return checkpoint


def _check_resume(
    uninterrupted: Future[Fit], data: Path, tmp_path: Path, case: str, device: tuple[str, ...]
) -> None:
    checkpoint = _interrupt(data, tmp_path, case, device)
    code, resumed = _fit(data, tmp_path / "resumed", "--resume", str(checkpoint), *device)
    assert code == 0
    assert resumed is not None
    full = uninterrupted.result()
    after = INTERRUPTIONS[case].checkpoint_step
    assert resumed["steps"] == [s for s in full["steps"] if s["step"] > after]
    assert resumed["final"] == full["final"]


@pytest.mark.parametrize("case", list(INTERRUPTIONS))
def test_resume_is_bitwise(
    uninterrupted: Callable[[tuple[str, ...]], Future[Fit]], data: Path, tmp_path: Path, case: str
) -> None:
    _check_resume(uninterrupted(NATIVE_CPU), data, tmp_path, case, NATIVE_CPU)


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(INTERRUPTIONS))
def test_resume_replayed_fit_is_bitwise(
    uninterrupted: Callable[[tuple[str, ...]], Future[Fit]], data: Path, tmp_path: Path, case: str
) -> None:
    _check_resume(uninterrupted(REPLAYED_BF16), data, tmp_path, case, REPLAYED_BF16)


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["sigterm-mid-epoch", "sigkill-mid-epoch"])
def test_resume_replayed_fp16_fit_is_bitwise(
    uninterrupted: Callable[[tuple[str, ...]], Future[Fit]], data: Path, tmp_path: Path, case: str
) -> None:
    # the GradScaler's scale and growth tracker are in the final digests
    _check_resume(uninterrupted(REPLAYED_FP16), data, tmp_path, case, REPLAYED_FP16)
