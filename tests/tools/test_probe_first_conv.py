"""The first-call probe: its processes per variant, the whole network's calls and the totals."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from tool_modules import load_tool, run_tool_main


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("probe_first_conv", monkeypatch)


def _config(tool: ModuleType, **changes: Any) -> Any:
    return dataclasses.replace(tool.CUDNN_START, **changes)


def test_run_variant_turns_cudnn_off_around_depthwise_only(tool: ModuleType) -> None:
    depthwise = _config(tool, kernel=(3, 3), padding=(1, 1), groups=8)
    configs = [tool.CUDNN_START, depthwise]
    run = tool.run_variant("channels_last+dw-native", configs, 2, torch.device("cpu"), 1)
    assert [row["cudnn"] for row in run["rows"]] == [True, False]
    assert torch.backends.cudnn.enabled
    assert all(row["output_channels_last"] for row in run["rows"])
    plain = tool.run_variant("contiguous", configs, 2, torch.device("cpu"), 1)
    assert [row["cudnn"] for row in plain["rows"]] == [True, True]
    assert not any(row["output_channels_last"] for row in plain["rows"])


def test_run_summary_counts_first_calls_once_and_settled_calls_per_use(tool: ModuleType) -> None:
    convs = [{"kind": "dense", "count": 3}, {"kind": "depthwise", "count": 2}]
    rows = [
        {
            "first_forward_s": 1.0,
            "first_backward_s": 0.5,
            "second_forward_s": 0.25,
            "second_backward_s": 0.25,
            "steady_ms": 2.0,
        },
        {
            "first_forward_s": 3.0,
            "first_backward_s": 2.0,
            "second_forward_s": 0.5,
            "second_backward_s": 0.5,
            "steady_ms": 1.0,
        },
    ]
    totals = tool.run_summary({"rows": rows}, convs)
    assert totals["first_call_s"]["dense"] == pytest.approx(1.0)
    assert totals["first_call_s"]["depthwise"] == pytest.approx(4.0)
    assert totals["first_call_s"]["all"] == pytest.approx(5.0)
    assert totals["steady_ms_per_step"]["dense"] == pytest.approx(6.0)
    assert totals["steady_ms_per_step"]["all"] == pytest.approx(8.0)


def test_run_network_times_two_calls_of_the_whole_network(tool: ModuleType) -> None:
    run = tool.run_network("channels_last", "yolo26n", 5, 32, 2, torch.device("cpu"))
    assert (run["variant"], run["batch"]) == ("channels_last", 2)
    halves = [
        f"{call}_{half}_s" for call in ("first", "second") for half in ("forward", "backward")
    ]
    assert sorted(run["network"]) == sorted(halves)
    assert all(seconds > 0 for seconds in run["network"].values())


def test_network_table_subtracts_the_second_call(tool: ModuleType) -> None:
    halves = {"first_forward_s": 4.0, "first_backward_s": 2.5}
    halves |= {"second_forward_s": 0.5, "second_backward_s": 1.0}
    start = {"first_forward_s": 1.0, "first_backward_s": 1.0}
    start |= {"second_forward_s": 0.0, "second_backward_s": 0.0}
    run = {"batch": 16, "variant": "channels_last", "round": 0, "process_s": 9.0}
    run |= {"network": halves, "first_conv": start}
    row = tool.network_table([run]).splitlines()[2]
    assert row == (
        "| 16 | channels_last | 0 | 4.000 | 2.500 | 0.500 | 1.000 | 5.000 | — | 2.000 | 9.0 |"
    )
    run["network"] = {**halves, "thread_warm_s": 3.25}
    assert "| 5.000 | 3.250 | 2.000 |" in tool.network_table([run]).splitlines()[2]


def test_run_network_warms_a_copy_on_another_thread_first(tool: ModuleType) -> None:
    run = tool.run_network(
        "contiguous", "yolo26n", 5, 32, 2, torch.device("cpu"), warm_in_thread=True
    )
    assert run["network"]["thread_warm_s"] > 0
    assert {"first_forward_s", "second_backward_s"} <= set(run["network"])


def test_variant_names_add_native_depthwise_per_layout(tool: ModuleType) -> None:
    names = tool.variant_names(["channels_last", "contiguous"], True)
    assert names == [
        "channels_last",
        "contiguous",
        "channels_last+dw-native",
        "contiguous+dw-native",
    ]
    assert tool.variant_names(["contiguous"], False) == ["contiguous"]


@pytest.mark.slow
def test_probe_first_conv_runs_a_variant_in_its_own_process_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = "--device cpu --imgsz 32 --batch 1 --steady 1 --layouts contiguous"
    run_tool_main("probe_first_conv", args, tmp_path, monkeypatch, data_root=False)
    result = json.loads((tmp_path / "first_conv.json").read_text())
    assert result["num_classes"] == 5  # the embedded synthetic dataset's
    (run,) = result["runs"]
    assert (run["variant"], run.get("error")) == ("contiguous", None)
    assert len(run["rows"]) == len(result["convs"]) == 62
    first = run["summary"]["first_call_s"]
    assert first["all"] == pytest.approx(first["dense"] + first["depthwise"])
    page = (tmp_path / "first_conv.md").read_text()
    assert "| 1 | contiguous | 0 |" in page
    assert "| 0 | 3→16 k3 s2 on 32×32 (float32 input, input without grad) | dense | 1 |" in page
