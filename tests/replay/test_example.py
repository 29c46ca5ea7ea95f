"""The Replay library docs page's plain-PyTorch example runs as shipped."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).parents[2] / "docs" / "replay_example.py"


def test_docs_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert "last loss" in out
    assert "'parity_mismatches': 0" in out
    if not torch.cuda.is_available():
        assert "no CUDA device: nothing was graphed" in out
