"""Atomic checkpoint writes and weights-only loads."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from lucid_yolo.train.callbacks import AtomicCheckpointIO, atomic_save


class _Unpicklable:
    def __reduce__(self) -> tuple[object, ...]:
        raise RuntimeError("disk full")


class _Code:
    """Any class: a weights-only load refuses to build it."""


def test_atomic_save_writes_file_and_leaves_no_temp(tmp_path: Path) -> None:
    atomic_save({"w": torch.ones(2)}, tmp_path / "ck" / "last.ckpt")
    assert [p.name for p in (tmp_path / "ck").iterdir()] == ["last.ckpt"]
    assert torch.equal(torch.load(tmp_path / "ck" / "last.ckpt")["w"], torch.ones(2))


def test_atomic_save_failure_keeps_previous_checkpoint(tmp_path: Path) -> None:
    target = tmp_path / "last.ckpt"
    atomic_save({"step": 1}, target)
    before = target.read_bytes()
    with pytest.raises(RuntimeError, match="disk full"):
        atomic_save({"step": 2, "bad": _Unpicklable()}, target)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_atomic_save_removes_what_a_killed_save_left(tmp_path: Path) -> None:
    left = tmp_path / ".last.ckpt.0123abcd.tmp"
    left.write_bytes(b"half a checkpoint")
    other = tmp_path / ".best.ckpt.0123abcd.tmp"
    other.write_bytes(b"another file's")
    atomic_save({"step": 2}, tmp_path / "last.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".best.ckpt.0123abcd.tmp", "last.ckpt"]


def test_checkpoint_io_round_trip(tmp_path: Path) -> None:
    io = AtomicCheckpointIO()
    io.save_checkpoint({"state_dict": {"w": torch.arange(3)}, "epoch": 2}, tmp_path / "a.ckpt")
    loaded = io.load_checkpoint(tmp_path / "a.ckpt")
    assert loaded["epoch"] == 2
    assert torch.equal(loaded["state_dict"]["w"], torch.arange(3))


def test_checkpoint_io_loads_weights_only_even_when_asked_otherwise(tmp_path: Path) -> None:
    torch.save({"object": _Code()}, tmp_path / "evil.ckpt")
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        AtomicCheckpointIO().load_checkpoint(tmp_path / "evil.ckpt", weights_only=False)


def test_checkpoint_io_rejects_storage_options(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="takes none"):
        AtomicCheckpointIO().save_checkpoint({}, tmp_path / "a.ckpt", storage_options={"x": 1})
