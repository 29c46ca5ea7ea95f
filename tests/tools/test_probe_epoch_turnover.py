"""The epoch-turnover probe runs on a CPU and writes one row per loader and epoch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tool_modules import run_tool_main


@pytest.mark.slow
def test_probe_epoch_turnover_writes_first_and_median_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = "--images 12 --imgsz 64 --batch 4 --workers 1 --epochs 2 --step-ms 0 --validation-ms 0"
    run_tool_main("probe_epoch_turnover", args, tmp_path, monkeypatch, data_root=False)
    result = json.loads((tmp_path / "epoch_turnover.json").read_text())
    for name in ("streamed", "per_epoch"):
        assert [(r["epoch"], r["batches"]) for r in result[name]] == [(0, 3), (1, 3)]
        assert all(r["first_ms"] >= 0 and r["median_other_ms"] >= 0 for r in result[name])
