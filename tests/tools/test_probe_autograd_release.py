"""The autograd-release probe: its refusal without CUDA, and on a GPU the drain it measures."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("probe_autograd_release", monkeypatch)


def test_probe_refuses_without_cuda_and_writes_nothing(
    tool: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tool.main(["--out", str(tmp_path / "out")]) == 2
    assert "needs a CUDA device" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


@pytest.mark.gpu
def test_gpu_no_gradient_outlives_the_drain(tool: ModuleType) -> None:
    held = tool.run_block(200, torch.device("cuda", torch.cuda.current_device()))
    assert held["after_drain"] == 0, held
