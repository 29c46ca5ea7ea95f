"""The exit-cost probe: the two ways a child ends, and the gap it reads."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("probe_exit_cost", monkeypatch)


def test_children_end_through_the_fast_exit_or_through_main_and_sys_exit(
    tool: ModuleType,
) -> None:
    assert tool.child_command("fast", ["fit"]) == [sys.executable, "-m", "lucid_yolo.cli", "fit"]
    teardown = tool.child_command("teardown", ["fit"])
    assert teardown[1:] == ["-c", tool.TEARDOWN_ENTRY, "fit"]
    assert "FastExit" not in tool.TEARDOWN_ENTRY


def test_exit_gap_reads_the_fit_end_the_child_printed(tool: ModuleType) -> None:
    stdout = f"noise\n{tool.FIT_END}100.25\n"
    done = subprocess.CompletedProcess(["fit"], 0, stdout=stdout, stderr="")
    assert tool.exit_gap(done, 101.0) == pytest.approx(0.75)


def test_exit_gap_names_a_failed_fit(tool: ModuleType) -> None:
    done = subprocess.CompletedProcess(["fit"], 2, stdout="", stderr="lucid-yolo: error: bad")
    with pytest.raises(RuntimeError, match=r"the fit failed \(exit 2\): lucid-yolo: error: bad"):
        tool.exit_gap(done, 1.0)


def test_the_fit_is_the_benchmarks_replayed_on_a_gpu_with_the_fit_end_callback(
    tool: ModuleType,
) -> None:
    args = argparse.Namespace(
        imgsz=64, batch=2, epochs=1, accelerator="gpu", root=Path("/tmp/probe")
    )
    fit = tool.fit_arguments(Path("data.yaml"), args)
    assert fit[:3] == ["fit", "--config", "detect-n"]
    assert fit[-1] == "--trainer.callbacks+=probe_exit_cost.FitEnd"
    for region in ("network", "loss", "update"):
        assert f"--model.replay.{region}=true" in fit
    args.accelerator = "cpu"
    cpu = tool.fit_arguments(Path("d"), args)
    assert not any(arg.startswith("--model.replay") for arg in cpu)
    assert cpu[cpu.index("--trainer.accelerator") + 1] == "cpu"
