"""The CPU step split counts a replayed step's region bookkeeping, the stand-in's work left out."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("cpu_step_split", monkeypatch)


def _row(ms: float, calls: float = 1.0) -> dict[str, float]:
    return {"ms_per_step": ms, "calls_per_step": calls}


def test_bookkeeping_leaves_out_what_the_stand_in_runs(tool: ModuleType) -> None:
    rows = {
        "RegionRecorder.__call__": _row(10.0, 2),
        "RegionGraphs.launch_forward": _row(7.5, 2),
        "RegionRecorder._launch_backward": _row(6.0, 2),
        "RegionGraphs.launch_backward": _row(5.0, 2),
    }
    assert tool.bookkeeping_ms(rows) == pytest.approx(3.5)
    assert tool.bookkeeping_ms({}) == 0.0


def test_summary_keeps_the_counted_rows_and_the_replay_counters(tool: ModuleType) -> None:
    report = {
        "wall_ms_per_step": 40.0,
        "rows": [
            {"function": "Binding.check", "ms_per_step": 1.5, "calls_per_step": 1.0},
            {"function": "Unrelated.call", "ms_per_step": 9.0, "calls_per_step": 3.0},
        ],
        "replay": {"all": {"replays": 5}},
    }
    summary = tool.summary(report)
    assert summary["rows"] == {"Binding.check": _row(1.5)}
    assert summary["replay"] == {"replays": 5}
    assert summary["bookkeeping_ms_per_step"] == 0.0


def test_unknown_configuration_is_refused(tool: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        tool.main(["--configs", "chain,fused", "--out", str(tmp_path / "out.json")])


def test_one_region_pays_one_region_s_calls_a_step(
    tool: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each configuration's fit in this process (the tool starts one process a fit)
    from lucid_yolo.train.data.synthetic import generate_synthetic

    data = generate_synthetic(tmp_path / "data", num_train=8, num_val=4, imgsz=64)
    args = tool.parser().parse_args(["--epochs", "2"])
    fits = {}
    for config in ("chain", "one-region"):
        result = tmp_path / f"{config}.json"
        monkeypatch.setenv("LUCID_HOST_SPLIT", str(result))
        tool.child(config, data, args)
        fits[config] = tool.summary(json.loads(result.read_text()))
    calls = {
        config: {name: row["calls_per_step"] for name, row in fit["rows"].items()}
        for config, fit in fits.items()
    }
    for name in ("RegionRecorder.__call__", "RegionRecorder._launch_backward", "Binding.check"):
        assert (calls["chain"][name], calls["one-region"][name]) == (2.0, 1.0), name
    for config, fit in fits.items():
        assert fit["replay"]["retirements"] == 0, config
        assert fit["bookkeeping_ms_per_step"] > 0.0, config
    # the chain also holds the loss region's copies of the outputs and their gradients
    assert 0 < fits["one-region"]["static_bytes"] < fits["chain"]["static_bytes"]
