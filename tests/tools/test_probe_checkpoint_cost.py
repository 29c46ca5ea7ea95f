"""The checkpoint-cost probe splits a CLI fit's saves on the training thread, on a CPU too."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from types import ModuleType

import pytest
import torch
from tool_modules import load_tool, run_tool_main


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("probe_checkpoint_cost", monkeypatch)


def _save(total_s: float, module_state_s: float) -> dict[str, float]:
    return {
        "step": 4,
        "total_s": total_s,
        "dump_s": total_s / 2,
        "module_state_s": module_state_s,
        "snapshot_s": total_s / 4,
        "rest_s": total_s / 4,
    }


def test_probe_checkpoint_cost_summary_splits_dumps_repeats_and_overlapped_steps(
    tool: ModuleType,
) -> None:
    record = {
        "epochs": 3,
        # the first save (start-up) stays out; then a dumped save and a repeat per epoch
        "saves": [_save(9.0, 1.0), _save(0.2, 0.01), _save(0.01, 0.0)] * 2,
        "writes": [(10.0, 10.5)],
        "steps": [(9.0, 9.1), (9.1, 9.2), (10.2, 10.4), (10.4, 10.5), (11.0, 11.1)],
    }
    result = tool.summary(record)
    assert (result["saves"], result["dumps"]) == (6, 4)
    assert result["save_ms_per_epoch"] == pytest.approx((0.2 + 0.01 + 9.0 + 0.2 + 0.01) * 500)
    assert result["per_save_ms"]["total_s"] == pytest.approx(200.0)  # the dumped saves' median
    assert result["repeat_ms"] == pytest.approx(10.0)
    assert result["writer_ms"] == pytest.approx(500.0 / 6)
    assert (result["overlapped_steps"], result["step_ms"]) == (2, pytest.approx(100.0))
    assert result["slowed_s"] == pytest.approx(0.1)  # 0.2 s and 0.1 s steps against 0.1 s


@pytest.mark.slow
def test_probe_checkpoint_cost_splits_a_cpu_cli_fits_saves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two of the four modes: each is a CLI fit of its own (about 20 s on CI's two cores)
    args = "--imgsz 64 --images 8 --val-images 4 --epochs 2 --batch 2 --improving"
    args += " --modes background dump-each"
    run_tool_main("probe_checkpoint_cost", args, tmp_path, monkeypatch)
    result = json.loads((tmp_path / "checkpoint_cost.json").read_text())
    assert set(result) >= {"background", "dump-each"}
    assert "foreground" not in result
    # best and last at each epoch's end, from one dump
    assert (result["background"]["saves"], result["background"]["dumps"]) == (4, 2)
    assert result["background"]["per_save_ms"]["dump_s"] > 0
    assert result["background"]["per_save_ms"]["snapshot_s"] > 0
    assert result["background"]["writer_ms"] > 0  # the writes ran on the writer thread
    assert (result["dump-each"]["saves"], result["dump-each"]["dumps"]) == (4, 4)  # as before
    assert "| background | 4 (2) |" in (tmp_path / "checkpoint_cost.md").read_text()


def test_probe_checkpoint_cost_times_the_snapshot_of_a_checkpoint_file(
    tool: ModuleType, tmp_path: Path
) -> None:
    torch.save({"state_dict": {"w": torch.ones(3)}, "epoch": 1}, tmp_path / "last.ckpt")
    result = tool.snapshot_cost(tmp_path / "last.ckpt", repeats=3)
    assert set(result) == {"host_snapshot_ms", "fill_ms"}
    assert all(ms > 0 for ms in result.values())


def test_probe_checkpoint_cost_switches_the_interval_only_on_the_writer_thread(
    tool: ModuleType,
) -> None:
    default = sys.getswitchinterval()
    seen: list[float] = []
    job = tool._switching(0.0005, lambda: seen.append(sys.getswitchinterval()))
    job()
    writer = threading.Thread(target=job)
    writer.start()
    writer.join()
    assert seen == [default, 0.0005]
    assert sys.getswitchinterval() == default


def test_probe_checkpoint_cost_puts_the_interval_back_when_the_job_fails(tool: ModuleType) -> None:
    default = sys.getswitchinterval()
    errors: list[BaseException] = []

    def failing() -> None:
        raise OSError("disk full")

    def run() -> None:
        try:
            tool._switching(0.0005, failing)()
        except OSError as error:
            errors.append(error)

    writer = threading.Thread(target=run)
    writer.start()
    writer.join()
    assert [str(e) for e in errors] == ["disk full"]
    assert sys.getswitchinterval() == default
