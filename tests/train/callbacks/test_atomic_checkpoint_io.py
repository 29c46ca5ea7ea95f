"""Atomic checkpoint writes and weights-only loads."""

from __future__ import annotations

import pickle
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from lucid_yolo.train.callbacks import AtomicCheckpointIO, atomic_checkpoint_io, atomic_save
from lucid_yolo.train.callbacks.atomic_checkpoint_io import BackgroundCheckpointWrites


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


def _background() -> AtomicCheckpointIO:
    """An IO writing in the background, as during a fit with BackgroundCheckpointWrites."""
    io = AtomicCheckpointIO()
    io.background = True
    return io


@pytest.fixture
def held_writes(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Background writes wait until the returned event is set."""
    release = threading.Event()
    write = atomic_checkpoint_io.atomic_save

    def held(obj: object, path: str | Path) -> None:
        assert release.wait(timeout=30)
        write(obj, path)

    monkeypatch.setattr(atomic_checkpoint_io, "atomic_save", held)
    return release


def test_checkpoint_io_returns_before_the_write_and_writes_the_state_of_the_save(
    tmp_path: Path, held_writes: threading.Event
) -> None:
    io = _background()
    weights = torch.zeros(3)
    io.save_checkpoint({"state_dict": {"w": weights}, "epoch": 1}, tmp_path / "last.ckpt")
    assert not (tmp_path / "last.ckpt").exists()
    weights.add_(1)  # the next training step
    held_writes.set()
    io.teardown()
    saved = torch.load(tmp_path / "last.ckpt")
    assert torch.equal(saved["state_dict"]["w"], torch.zeros(3))
    assert saved["epoch"] == 1


def test_checkpoint_io_loads_and_removes_after_the_writes_asked_before(
    tmp_path: Path, held_writes: threading.Event
) -> None:
    io = _background()
    io.save_checkpoint({"epoch": 1}, tmp_path / "a.ckpt")
    io.save_checkpoint({"epoch": 2}, tmp_path / "b.ckpt")
    io.remove_checkpoint(tmp_path / "a.ckpt")
    threading.Timer(0.2, held_writes.set).start()
    assert io.load_checkpoint(tmp_path / "b.ckpt")["epoch"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["b.ckpt"]


def test_checkpoint_io_failed_write_raises_at_the_fits_end_and_keeps_the_previous_file(
    tmp_path: Path,
) -> None:
    io = _background()
    io.save_checkpoint({"epoch": 1}, tmp_path / "last.ckpt")
    io.save_checkpoint({"epoch": 2, "bad": _Unpicklable()}, tmp_path / "last.ckpt")
    with pytest.raises(RuntimeError, match="disk full") as raised:
        io.teardown()
    assert raised.value.__notes__ == [
        f"AtomicCheckpointIO: writing {tmp_path / 'last.ckpt'} failed in the background"
    ]
    assert io.load_checkpoint(tmp_path / "last.ckpt")["epoch"] == 1


def test_checkpoint_io_failed_write_raises_at_the_next_save(tmp_path: Path) -> None:
    io = _background()
    io.save_checkpoint({"epoch": 1, "bad": _Unpicklable()}, tmp_path / "last.ckpt")
    with pytest.raises(RuntimeError, match="disk full"):
        _save_for(io, tmp_path / "other.ckpt", seconds=30)  # until the failed write has finished
    io.teardown()


def _save_for(io: AtomicCheckpointIO, path: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        io.save_checkpoint({"epoch": 2}, path)
        time.sleep(0.01)


@pytest.mark.gpu
def test_checkpoint_io_snapshots_cuda_tensors_on_the_host_behind_the_queued_work(
    tmp_path: Path,
) -> None:
    io = _background()
    weights = torch.zeros(256, 256, device="cuda")
    torch.cuda._sleep(100_000_000)  # the device is busy when the save is asked
    weights.add_(1)
    io.save_checkpoint({"state_dict": {"w": weights}}, tmp_path / "last.ckpt")
    weights.add_(1)  # queued after the snapshot's copy
    io.teardown()
    saved = torch.load(tmp_path / "last.ckpt")["state_dict"]["w"]
    assert saved.device.type == "cpu"
    assert torch.equal(saved, torch.ones(256, 256))


def test_checkpoint_io_outside_a_fit_saves_before_it_returns(tmp_path: Path) -> None:
    io = AtomicCheckpointIO()
    io.save_checkpoint({"epoch": 1}, tmp_path / "last.ckpt")
    assert torch.load(tmp_path / "last.ckpt")["epoch"] == 1
    io.remove_checkpoint(tmp_path / "last.ckpt")
    assert not (tmp_path / "last.ckpt").exists()


def test_checkpoint_io_teardown_ends_background_writing(
    tmp_path: Path, held_writes: threading.Event
) -> None:
    io = _background()
    io.save_checkpoint({"epoch": 1}, tmp_path / "a.ckpt")
    held_writes.set()
    io.teardown()
    assert not io.background
    io.save_checkpoint({"epoch": 2}, tmp_path / "b.ckpt")  # after the fit: on disk at return
    assert torch.load(tmp_path / "b.ckpt")["epoch"] == 2


def test_checkpoint_io_writes_the_later_of_two_saves_to_one_file(tmp_path: Path) -> None:
    io = _background()
    io.save_checkpoint({"epoch": 1}, tmp_path / "last.ckpt")
    io.save_checkpoint({"epoch": 2}, tmp_path / "last.ckpt")
    io.teardown()
    assert torch.load(tmp_path / "last.ckpt")["epoch"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_checkpoint_io_teardown_of_a_failing_fit_notes_a_failed_write_on_the_fits_error(
    tmp_path: Path,
) -> None:
    io = _background()
    io.save_checkpoint({"epoch": 1, "bad": _Unpicklable()}, tmp_path / "last.ckpt")
    with pytest.raises(ValueError, match="the fit's own error") as raised:
        _fail_and_tear_down(io)
    assert raised.value.__notes__[0] == "and then: RuntimeError: disk full"
    assert "writing" in raised.value.__notes__[1]
    assert not io.background


def _fail_and_tear_down(io: AtomicCheckpointIO) -> None:
    """A fit failing: Lightning tears down inside its ``except`` block, then re-raises."""
    try:
        raise ValueError("the fit's own error")
    except ValueError:
        io.teardown()
        raise


class _Uploader:
    """A logger that uploads each checkpoint as it is saved (W&B's or MLflow's log_model)."""

    _log_model = "all"


def _trainer(io: AtomicCheckpointIO, *loggers: object) -> Any:
    return SimpleNamespace(
        strategy=SimpleNamespace(checkpoint_io=io), loggers=list(loggers), is_global_zero=True
    )


def test_background_checkpoint_writes_turns_background_writing_on_for_the_fit() -> None:
    io = AtomicCheckpointIO()
    BackgroundCheckpointWrites().on_fit_start(_trainer(io, SimpleNamespace()), nn.Module())
    assert io.background


def test_background_checkpoint_writes_stays_off_for_a_logger_that_uploads_checkpoints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    io = AtomicCheckpointIO()
    BackgroundCheckpointWrites().on_fit_start(_trainer(io, _Uploader()), nn.Module())
    assert not io.background
    assert capsys.readouterr().out == (
        "checkpoints: written in the training thread, since _Uploader uploads each checkpoint "
        "file as soon as it is saved\n"
    )


def test_checkpoint_io_writes_the_same_file_in_the_background_or_not(tmp_path: Path) -> None:
    weights = torch.arange(6.0).view(1, 2, 1, 3).to(memory_format=torch.channels_last)
    checkpoint = {"state_dict": {"w": weights}}
    AtomicCheckpointIO().save_checkpoint(checkpoint, tmp_path / "now.ckpt")
    io = _background()
    io.save_checkpoint(checkpoint, tmp_path / "later.ckpt")
    io.teardown()
    now, later = (torch.load(tmp_path / f"{n}.ckpt")["state_dict"]["w"] for n in ("now", "later"))
    assert torch.equal(now, weights)
    assert now.is_contiguous()
    assert later.is_contiguous()
    assert torch.equal(now, later)


def test_checkpoint_io_save_again_links_a_save_of_the_same_content(tmp_path: Path) -> None:
    io = _background()
    checkpoint = {"state_dict": {"w": torch.arange(3.0)}, "callbacks": {"best": "b.ckpt"}}
    io.save_checkpoint(checkpoint, tmp_path / "best.ckpt")
    io.save_again(tmp_path / "last.ckpt", {"callbacks": {"best": "b.ckpt"}})
    io.teardown()
    assert (tmp_path / "last.ckpt").samefile(tmp_path / "best.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.ckpt", "last.ckpt"]


def test_checkpoint_io_save_again_writes_the_replaced_entries_in_their_place(
    tmp_path: Path,
) -> None:
    io = _background()
    weights = torch.arange(3.0)
    checkpoint = {"state_dict": {"w": weights}, "callbacks": {"score": torch.tensor(1.0)}, "e": 0}
    io.save_checkpoint(checkpoint, tmp_path / "best.ckpt")
    weights.add_(1)  # changes after the first save are not the second's
    io.save_again(tmp_path / "last.ckpt", {"callbacks": {"score": torch.tensor(2.0)}})
    io.teardown()
    last = torch.load(tmp_path / "last.ckpt")
    assert not (tmp_path / "last.ckpt").samefile(tmp_path / "best.ckpt")
    assert list(last) == ["state_dict", "callbacks", "e"]
    assert last["callbacks"]["score"].item() == 2.0
    assert last["state_dict"]["w"].tolist() == [0.0, 1.0, 2.0]


def test_checkpoint_io_save_again_writes_when_the_first_file_failed(tmp_path: Path) -> None:
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1}, tmp_path / "best.ckpt")  # an older best.ckpt
    with pytest.raises(RuntimeError, match="disk full"):
        io.save_checkpoint({"step": 2, "bad": _Unpicklable()}, tmp_path / "best.ckpt")
    with pytest.raises(RuntimeError, match="disk full"):  # the same content, written again
        io.save_again(tmp_path / "last.ckpt", {"step": 2})
    assert not (tmp_path / "last.ckpt").exists()  # never a link to the older best.ckpt


def test_checkpoint_io_save_again_needs_a_save_of_the_fit(tmp_path: Path) -> None:
    io = _background()
    io.save_checkpoint({"step": 1}, tmp_path / "best.ckpt")
    assert io.last_save == 1
    io.teardown()
    assert io.last_save is None
    with pytest.raises(RuntimeError, match="no save to repeat"):
        io.save_again(tmp_path / "last.ckpt", {})
