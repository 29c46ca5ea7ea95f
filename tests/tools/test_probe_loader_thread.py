"""The loader-thread probe runs each variant's fit in its own process, on a CPU too."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from tool_modules import load_tool, run_tool_main


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("probe_loader_thread", monkeypatch)


@pytest.mark.slow
def test_probe_loader_thread_times_a_packed_fit_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = "--batch 2 --steps 4 --images 8 --imgsz 64 --workers 1 --fit-timeout 600"
    args += " --variants packed cli-callbacks"
    run_tool_main("probe_loader_thread", args, tmp_path, monkeypatch)
    rows = json.loads((tmp_path / "loader_thread.json").read_text())
    order = [r["variant"] for r in rows]
    assert order == ["packed", "cli-callbacks"]
    assert [r.get("error") for r in rows] == [None] * 2
    assert rows[0]["pack_batches"] is True
    assert rows[1]["cli_callbacks"] is True
    assert {"PhaseTimer", "EpochSummary", "RngState"} <= set(rows[1]["callbacks"])
    assert "ModelCheckpoint" not in rows[1]["callbacks"]
    assert (rows[1]["logger"], rows[0]["logger"]) == ("CSVLogger", None)
    assert "PhaseTimer" not in rows[0]["callbacks"]
    assert all(r["steps_timed"] == 2 and r["period_ms"] > 0 for r in rows)
    assert "| 2 | packed |" in (tmp_path / "loader_thread.md").read_text()


@pytest.mark.slow
def test_probe_loader_thread_receive_times_batches_without_a_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = "--batch 2 --images 8 --imgsz 64 --workers 1 --receive 3 --gap 0 --variants packed"
    run_tool_main("probe_loader_thread", args, tmp_path, monkeypatch)
    (row,) = json.loads((tmp_path / "loader_receive.json").read_text())
    assert row.get("error") is None
    assert (row["variant"], row["batches_timed"], row["tensors"]) == ("packed", 3, 10)
    assert row["main_cpu_us_median"] > 0
    assert not (tmp_path / "loader_thread.json").exists()


def test_probe_loader_thread_rounds_alternate_the_order(tool: ModuleType) -> None:
    variants = ["tensors", "packed", "file-system"]
    orders = [tool.round_order(variants, r) for r in range(3)]
    assert orders == [variants, variants[::-1], variants]


def test_probe_loader_thread_table_compares_with_ten_tensors(tool: ModuleType) -> None:
    rows = [
        {"variant": "tensors", "batch": 4, "period_ms": 40.0, "between_ms": 5.0, "fit_s": 20},
        {"variant": "packed", "batch": 4, "period_ms": 30.0, "between_ms": 2.0, "fit_s": 19},
        {"variant": "file-system", "batch": 4, "error": "timed out (120 s)"},
    ]
    lines = tool.table(rows).splitlines()
    assert lines[3] == "| 4 | packed | 30.00 | 0.750 | 2.00 | 19 |"
    assert lines[4].startswith("| 4 | file-system | failed: timed out")
