"""The CPU orthogonalisation benchmark: its rows, its report and its table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tool_modules import run_tool_main


def test_bench_orthogonalise_cpu_times_padded_and_unpadded_stacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = f"--dtypes float32 --repeats 1 --flop-ratios 2.0 1.0 --out {tmp_path}"
    rows = run_tool_main("bench_orthogonalise_cpu", args, tmp_path, monkeypatch, data_root=False)
    assert isinstance(rows, list)
    padded, unpadded = rows
    assert (padded["ns_max_flop_ratio"], unpadded["ns_max_flop_ratio"]) == (2.0, 1.0)
    assert padded["matrices"] == unpadded["matrices"] == 126
    assert padded["stacks"] < unpadded["stacks"]
    assert all(row["seconds"] > 0 for row in rows)
    report = json.loads((tmp_path / "orthogonalise_cpu.json").read_text())
    assert (report["threads"], report["repeats"], report["rows"]) == (1, 1, rows)
    table = capsys.readouterr().out
    assert "| yolo26n | 2.0 | float32 | 126 |" in table
    assert "| yolo26n | 1.0 | float32 | 126 |" in table
