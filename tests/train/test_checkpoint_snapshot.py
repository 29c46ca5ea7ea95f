"""The host snapshot a checkpoint is written from, and checkpoint content comparison."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from lucid_yolo.train.checkpoint_snapshot import fill, host_snapshot, same_content


def test_host_snapshot_keeps_the_checkpoints_layout_and_takes_each_tensor_apart(
    tmp_path: Path,
) -> None:
    shared = torch.arange(4.0)
    checkpoint = {
        "state_dict": OrderedDict(a=shared, b=shared[:2]),
        "optimizer_states": [{"state": {0: {"momentum": torch.ones(2)}}, "lr": 0.01}],
        "loops": ("epoch", 3),
    }
    layout, copies = host_snapshot(checkpoint)
    shared.mul_(2)
    filled = fill(layout, copies)
    assert isinstance(filled["state_dict"], OrderedDict)
    assert filled["state_dict"]["a"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert filled["state_dict"]["b"].tolist() == [0.0, 1.0]
    assert filled["optimizer_states"][0]["lr"] == 0.01
    assert filled["loops"] == ("epoch", 3)
    assert filled["state_dict"]["b"].untyped_storage().nbytes() == 8  # its own storage


def test_host_snapshot_keeps_the_state_dicts_module_versions() -> None:
    state = nn.BatchNorm2d(2).state_dict()
    layout, copies = host_snapshot({"state_dict": state})
    filled = fill(layout, copies)
    assert filled["state_dict"]._metadata == state._metadata  # type: ignore[attr-defined]


def test_same_content_tells_tensors_keys_and_types_apart() -> None:
    base = {"a": torch.ones(2), "b": [1, (2.0, "x")]}
    assert same_content(base, {"a": torch.ones(2), "b": [1, (2.0, "x")]})
    assert not same_content(base, {"b": [1, (2.0, "x")], "a": torch.ones(2)})
    assert not same_content(base, {"a": torch.ones(2, dtype=torch.float64), "b": [1, (2.0, "x")]})
    assert not same_content(base, {"a": torch.ones(2), "b": [1, [2.0, "x"]]})
    assert not same_content(torch.tensor(float("nan")), torch.tensor(float("nan")))


class _Pair(NamedTuple):
    first: torch.Tensor
    second: int


@dataclasses.dataclass
class _Holder:
    tensor: torch.Tensor


def test_host_snapshot_takes_the_tensors_of_named_tuples_and_dataclasses_apart() -> None:
    tensor = torch.zeros(2)
    checkpoint = {"pair": _Pair(tensor, 3), "holder": _Holder(tensor), "name": "x"}
    layout, copies = host_snapshot(checkpoint)
    tensor.add_(1)
    filled = fill(layout, copies)
    assert filled["pair"] == _Pair(filled["pair"].first, 3)
    assert filled["pair"].first.tolist() == [0.0, 0.0]
    assert isinstance(filled["holder"], _Holder)
    assert filled["holder"].tensor.tolist() == [0.0, 0.0]
    assert filled["name"] == "x"
