"""The safetensors reader and writer."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from lucid_yolo.models import WeightsError
from lucid_yolo.models.weights import read_safetensors, write_safetensors


def test_safetensors_round_trip_keeps_dtypes_shapes_and_values(tmp_path: Path) -> None:
    tensors = {
        "a": torch.randn(3, 4),
        "b": torch.randn(5).half(),
        "c": torch.randn(2, 2).bfloat16(),
        "d": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "e": torch.tensor([True, False]),
        "f": torch.zeros(0, 3),
        "g": torch.tensor(7.0),
    }
    path = tmp_path / "t.safetensors"
    write_safetensors(tensors, path, {"format": "pt"})
    read = read_safetensors(path)
    assert list(read) == list(tensors)
    for name, tensor in tensors.items():
        assert read[name].dtype == tensor.dtype, name
        assert torch.equal(read[name], tensor), name


def test_safetensors_header_is_standard(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    write_safetensors({"w": torch.ones(2, dtype=torch.float32)}, path)
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    assert size % 8 == 0
    assert json.loads(data[8 : 8 + size]) == {
        "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    }


def test_read_safetensors_header_longer_than_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(WeightsError, match="header length 1000 does not fit the file"):
        read_safetensors(path)


def test_read_safetensors_offsets_outside_data(tmp_path: Path) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    path = tmp_path / "short.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    with pytest.raises(WeightsError, match=r"entry 'w' claims bytes \[0, 16\)"):
        read_safetensors(path)


def test_read_safetensors_unknown_dtype(tmp_path: Path) -> None:
    header = json.dumps({"w": {"dtype": "F8", "shape": [1], "data_offsets": [0, 1]}}).encode()
    path = tmp_path / "f8.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0")
    with pytest.raises(WeightsError, match="entry 'w' is not a tensor description"):
        read_safetensors(path)
