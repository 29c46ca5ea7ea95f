"""A fit killed mid-epoch (SIGTERM, or SIGKILL after a checkpoint) resumes bit for bit.

Each fit runs :mod:`resume_harness` in its own process: the uninterrupted fit, a fit that sends
itself the signal after a step, and the fit resumed from the ``last.ckpt`` the first one left.
The resumed fit must run the same batches with the same loss bits as the uninterrupted one from
the step after the checkpoint on, and end with the same digests of weights, EMA, optimizer,
scheduler, scaler, random generators and loader position.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lucid_yolo.train.data.synthetic import generate_synthetic

HARNESS = Path(__file__).with_name("resume_harness.py")


def _fit(data: Path, root: Path, *args: str) -> tuple[int, dict[str, Any] | None]:
    out = root.with_suffix(".json")
    done = subprocess.run(
        [sys.executable, str(HARNESS), str(data), str(root), str(out), *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    result = json.loads(out.read_text()) if out.is_file() else None
    return done.returncode, result


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("resume-data")
    return generate_synthetic(root, num_train=8, num_val=2, imgsz=64, seed=0)


def _accelerator(replay: bool) -> tuple[str, ...]:
    return ("--accelerator", "gpu", "--replay") if replay else ()


def _check_resume(
    data: Path, tmp_path: Path, kill: tuple[str, ...], checkpoint_step: int, replay: bool
) -> None:
    device = _accelerator(replay)
    code, full = _fit(data, tmp_path / "full", *device)
    assert code == 0
    assert full is not None
    code, killed = _fit(data, tmp_path / "killed", *kill, *device)
    assert killed is None
    assert code in (0, -signal.SIGKILL)
    checkpoint = tmp_path / "killed" / "checkpoints" / "last.ckpt"
    code, resumed = _fit(data, tmp_path / "resumed", "--resume", str(checkpoint), *device)
    assert code == 0
    assert resumed is not None
    assert resumed["steps"] == [s for s in full["steps"] if s["step"] > checkpoint_step]
    assert resumed["final"] == full["final"]


def test_resume_after_sigterm_mid_epoch_is_bitwise(data: Path, tmp_path: Path) -> None:
    _check_resume(data, tmp_path, ("--kill-at", "6", "--signal", "TERM"), 6, replay=False)


def test_resume_after_sigkill_from_last_checkpoint_is_bitwise(data: Path, tmp_path: Path) -> None:
    kill = ("--kill-at", "5", "--signal", "KILL", "--every-n-steps", "3")
    _check_resume(data, tmp_path, kill, 3, replay=False)


@pytest.mark.xfail(
    strict=True,
    reason="open: steps 5-8 and every weight, EMA, optimizer, scheduler and loader digest match, "
    "but the global torch generator differs: the next epoch's DataLoader iterator draws its base "
    "seed before RngState restores at the first batch (docs/engineering/reliability.md)",
)
def test_resume_from_a_checkpoint_written_at_an_epoch_end_is_bitwise(
    data: Path, tmp_path: Path
) -> None:
    # 4 steps per epoch: last.ckpt of step 4 holds epoch 0 complete
    kill = ("--kill-at", "6", "--signal", "KILL", "--every-n-steps", "4")
    _check_resume(data, tmp_path, kill, 4, replay=False)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("kill", "checkpoint_step"),
    [
        (("--kill-at", "6", "--signal", "TERM"), 6),
        (("--kill-at", "5", "--signal", "KILL", "--every-n-steps", "3"), 3),
    ],
)
def test_resume_replayed_fit_is_bitwise(
    data: Path, tmp_path: Path, kill: tuple[str, ...], checkpoint_step: int
) -> None:
    _check_resume(data, tmp_path, kill, checkpoint_step, replay=True)
