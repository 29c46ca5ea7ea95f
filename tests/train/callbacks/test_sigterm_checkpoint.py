"""The SIGTERM save says "saved" only once the checkpoint is on disk."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import nn

from lucid_yolo.train.callbacks import AtomicCheckpointIO, SigtermCheckpoint


class _Unpicklable:
    def __reduce__(self) -> tuple[object, ...]:
        raise RuntimeError("disk full")


def _trainer(root: Path, checkpoint: dict[str, Any]) -> Any:
    """A fit at step 3 whose checkpoints go through a background-writing AtomicCheckpointIO."""
    io = AtomicCheckpointIO()
    io.background = True
    return SimpleNamespace(
        strategy=SimpleNamespace(checkpoint_io=io),
        save_checkpoint=lambda path: io.save_checkpoint(checkpoint, path),
        checkpoint_callback=None,
        default_root_dir=str(root),
        sanity_checking=False,
        global_step=3,
    )


def test_sigterm_checkpoint_reports_the_save_once_the_background_write_is_on_disk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    callback = SigtermCheckpoint()
    callback.on_exception(_trainer(tmp_path, {"epoch": 1}), nn.Module(), SIGTERMException())
    path = tmp_path / "checkpoints" / "last.ckpt"
    assert torch.load(path)["epoch"] == 1
    assert callback.saved_path == path
    assert capsys.readouterr().out.startswith(f"SIGTERM: saved {path} at step 3;")


def test_sigterm_checkpoint_says_a_failed_write_and_lets_the_stop_go_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    callback = SigtermCheckpoint()
    trainer = _trainer(tmp_path, {"bad": _Unpicklable()})
    callback.on_exception(trainer, nn.Module(), SIGTERMException())
    path = tmp_path / "checkpoints" / "last.ckpt"
    assert callback.saved_path is None
    assert not path.exists()
    assert capsys.readouterr().out == (
        f"SIGTERM: writing {path} failed (RuntimeError: disk full)\n"
    )
    trainer.strategy.checkpoint_io.teardown()  # the failure was reported once, not kept
