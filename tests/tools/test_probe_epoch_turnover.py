"""The epoch-turnover probe runs on a CPU and writes one row per loader and epoch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "probe_epoch_turnover.py"


@pytest.mark.slow
def test_probe_epoch_turnover_writes_first_and_median_waits(tmp_path: Path) -> None:
    args = "--images 12 --imgsz 64 --batch 4 --workers 1 --epochs 2 --step-ms 0 --validation-ms 0"
    done = subprocess.run(
        [sys.executable, str(TOOL), *args.split()],
        env={**os.environ, "OUT": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "epoch_turnover.json").read_text())
    for name in ("streamed", "per_epoch"):
        assert [(r["epoch"], r["batches"]) for r in result[name]] == [(0, 3), (1, 3)]
        assert all(r["first_ms"] >= 0 and r["median_other_ms"] >= 0 for r in result[name])
