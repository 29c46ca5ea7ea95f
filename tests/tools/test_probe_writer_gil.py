"""The writer-GIL probe: one round's numbers, the interval put back, the payload's tensors."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from tool_modules import load_tool, run_tool_main


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("probe_writer_gil", monkeypatch)


def test_probe_writer_gil_round_writes_and_puts_the_interval_back(
    tool: ModuleType, tmp_path: Path
) -> None:
    before = sys.getswitchinterval()
    row = tool.one_round({"w": torch.zeros(8)}, tmp_path / "x.ckpt", 0.0005)
    assert sys.getswitchinterval() == before
    assert torch.load(tmp_path / "x.ckpt", weights_only=True)["w"].shape == (8,)
    assert row["interval_s"] == 0.0005
    assert row["write_ms"] > 0
    assert row["longest_ms"] >= 0
    assert row["gaps"] >= 0


def test_probe_writer_gil_round_raises_what_the_write_raised(
    tool: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("a file where the folder would be")
    before = sys.getswitchinterval()
    with pytest.raises(FileExistsError):
        tool.one_round({"w": torch.zeros(8)}, tmp_path / "file" / "x.ckpt", 0.0005)
    assert sys.getswitchinterval() == before


def test_probe_writer_gil_payload_holds_weights_ema_and_momenta(tool: ModuleType) -> None:
    checkpoint = tool.payload("yolo26n")
    weights = len(checkpoint["state_dict"])
    momenta = len(checkpoint["optimizer_states"][0]["state"])
    assert tool.tensors_in(checkpoint) == 2 * weights + momenta


@pytest.mark.slow
def test_probe_writer_gil_main_writes_its_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_tool_main(
        "probe_writer_gil", "--intervals 0.0005 --rounds 1", tmp_path, monkeypatch, data_root=False
    )
    result = json.loads((tmp_path / "writer_gil.json").read_text())
    assert result["tensors"] > 1000
    assert [row["interval_s"] for row in result["rounds"]] == [0.0005]
