"""The restricted reading of pickled checkpoints: what it accepts, what it refuses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from lucid_yolo.models import WeightsError
from lucid_yolo.models.weights import StandIn, read_pickled_checkpoint

FIXTURES = Path(__file__).parent.parent / "fixtures"


class _Payload:
    """Unpickling this runs ``os.system`` in a plain ``pickle.load``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def test_read_pickled_checkpoint_collects_the_network_state_dict() -> None:
    checkpoint = read_pickled_checkpoint(FIXTURES / "ultralytics-detect.pt")
    assert len(checkpoint.tensors) == 708
    assert checkpoint.tensors["model.0.conv.weight"].dtype == torch.float16
    assert checkpoint.config is not None
    assert checkpoint.config["scale"] == "n"


def test_read_pickled_checkpoint_refuses_code_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    torch.save({"model": _Payload(marker)}, path)
    with pytest.raises(WeightsError, match=r"names '(posix|nt)\.system'.*refusing to unpickle"):
        read_pickled_checkpoint(path)
    assert not marker.exists()


def test_read_pickled_checkpoint_stand_ins_only_record(tmp_path: Path) -> None:
    # an allowed class name is replaced, whatever the real class would have done
    path = tmp_path / "plain.pt"
    torch.save({"model": {"backbone.w": torch.ones(2)}}, path)
    assert set(read_pickled_checkpoint(path).tensors) == {"backbone.w"}
    assert StandIn(1, 2).call_args == (1, 2)


def test_read_pickled_checkpoint_not_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "noise.pt"
    path.write_bytes(b"not a zip and not a pickle")
    with pytest.raises(WeightsError, match=r"not a checkpoint written by torch\.save"):
        read_pickled_checkpoint(path)


def test_read_pickled_checkpoint_without_network(tmp_path: Path) -> None:
    path = tmp_path / "args.pt"
    torch.save({"epoch": 3}, path)
    with pytest.raises(WeightsError, match="holds no network"):
        read_pickled_checkpoint(path)
