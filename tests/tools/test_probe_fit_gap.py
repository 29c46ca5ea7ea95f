"""The fit-gap probe splits a CLI fit's epochs at their hooks, on a CPU too."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from gc_frozen import is_frozen
from tool_modules import load_tool, run_tool_main

from lucid_yolo.train.callbacks import SetUpObjectsFrozen


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("probe_fit_gap", monkeypatch)


def _epoch(
    steps: int,
    steps_s: float,
    turnover_s: float,
    step_ms: float = 9.0,
    between_ms: float = 1.0,
    late_check_waits: float = 0.0,
) -> dict[str, float]:
    return {
        "steps": steps,
        "first_s": 0.1,
        "steps_s": steps_s,
        "period_ms": steps_s * 1000.0 / (steps - 1),
        "to_val_s": 0.0,
        "val_s": 2.0,
        "turnover_s": turnover_s,
        "checkpoint_s": turnover_s / 2,
        "late_check_waits": late_check_waits,
        **{f"step{stat}_ms": step_ms for stat in ("", "_mean", "_p90", "_max")},
        **{f"between{stat}_ms": between_ms for stat in ("", "_mean", "_p90", "_max")},
        "first_gap_ms": 30.0,
    }


def test_probe_fit_gap_summary_leaves_the_first_epoch_out(tool: ModuleType) -> None:
    epochs = [
        _epoch(11, 5.0, 9.0, step_ms=500.0, late_check_waits=10.0),
        _epoch(11, 0.2, 0.3, between_ms=2.0, late_check_waits=3.0),
        _epoch(11, 0.2, 0.5),
        _epoch(11, 0.2, 0.5, step_ms=7.0, between_ms=4.0, late_check_waits=5.0),
    ]
    result = tool.summary(epochs)
    assert (result["epochs"], result["steps"]) == (3, 33)
    assert result["train_s"] == pytest.approx(0.1 + 0.2 + 0.3 + 2 * (0.1 + 0.2 + 0.5))
    assert result["per_step_ms"]["turnover_s"] == pytest.approx(1300.0 / 33)
    assert result["per_step_ms"]["val_s"] == pytest.approx(6000.0 / 33)
    assert result["steady_period_ms"] == pytest.approx(20.0)
    assert result["late_check_waits"] == 3.0
    timeline = result["device_timeline_ms"]
    assert (timeline["step_ms"], timeline["between_ms"]) == (9.0, 2.0)
    text = tool.table(result)
    assert "| turnover_s | 39.39 | 1.300 |" in text
    assert (
        "late loss checks that waited for the device in an epoch's steady steps "
        "(median over epochs) 3" in text
    )
    assert "step (median epoch): median 9.00, mean 9.00, p90 9.00, max 9.00 ms" in text
    assert "between steps (median epoch): median 2.00, mean 2.00, p90 2.00, max 2.00 ms" in text
    assert "gap after the first step (the probe synchronises there; median epoch): 30.00 ms" in text
    assert "garbage collections" not in text


def test_probe_fit_gap_describes_a_tail_and_the_collections(tool: ModuleType) -> None:
    stats = tool._describe("step", [10.0] * 9 + [40.0])
    assert stats == {
        "step_ms": 10.0,
        "step_mean_ms": 13.0,
        "step_p90_ms": 10.0,
        "step_max_ms": 40.0,
    }
    epochs = [_epoch(3, 0.2, 0.3)] + [
        {**_epoch(3, 0.2, 0.3), "gc_count": n, "gc_full": 1, "gc_ms": 2.0 * n, "gc_max_ms": 1.5}
        for n in (4, 6, 8)
    ]
    result = tool.summary(epochs)
    assert result["gc_per_epoch"] == {"gc_count": 6, "gc_full": 1, "gc_ms": 12.0, "gc_max_ms": 1.5}
    assert "garbage collections (median epoch): 6, 1 full, 12.0 ms, longest 1.5 ms" in tool.table(
        result
    )


def test_probe_fit_gap_p90_is_the_nearest_rank(tool: ModuleType) -> None:
    assert tool._describe("gap", [float(v) for v in range(1, 21)])["gap_p90_ms"] == 18.0
    assert tool._describe("gap", [5.0])["gap_p90_ms"] == 5.0
    assert set(tool._describe("gap", []).values()) == {None}


def test_probe_fit_gap_turns_the_fit_s_freeze_off_only_when_asked(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    for asked in (False, True):
        freeze = SetUpObjectsFrozen()
        trainer = SimpleNamespace(save_checkpoint=lambda *a, **k: None, callbacks=[freeze])
        if asked:
            monkeypatch.setenv(tool.NO_FREEZE_ENV, "1")
        gaps = tool.FitGaps()
        gaps.setup(trainer, None, "fit")
        set_up: list[object] = []
        try:
            freeze.on_train_start(trainer, None)  # type: ignore[arg-type]
            assert is_frozen(set_up) is not asked
        finally:
            freeze.teardown(trainer, None, "fit")  # type: ignore[arg-type]
            gaps.teardown(trainer, None, "fit")
        assert not is_frozen(set_up)


def test_probe_fit_gap_counts_collections_only_while_armed(tool: ModuleType) -> None:
    pauses = tool.GcPauses()
    pauses("start", {"generation": 2})
    pauses("stop", {"generation": 2})
    assert pauses.take()["gc_count"] == 0
    pauses.armed = True
    for generation in (0, 2):
        pauses("start", {"generation": generation})
        pauses("stop", {"generation": generation})
    taken = pauses.take()
    assert (taken["gc_count"], taken["gc_full"]) == (2, 1)
    assert taken["gc_ms"] >= taken["gc_max_ms"] >= 0.0
    assert pauses.take()["gc_count"] == 0


def test_probe_fit_gap_table_leaves_out_a_timeline_it_lacks(tool: ModuleType) -> None:
    lacking = {
        key: None
        for key in _epoch(2, 0.2, 0.3)
        if key.startswith(("step_", "between_", "first_gap"))
    }
    epochs = [_epoch(2, 0.2, 0.3), {**_epoch(2, 0.2, 0.3), **lacking}]
    result = tool.summary(epochs)
    assert set(result["device_timeline_ms"].values()) == {None}
    text = tool.table(result)
    assert "step (median epoch)" not in text
    assert "between steps" not in text
    assert "gap after the first step" not in text


@pytest.mark.slow
def test_probe_fit_gap_splits_a_cpu_cli_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = "--imgsz 64 --images 8 --val-images 4 --epochs 2 --batch 2 --native --profile"
    run_tool_main("probe_fit_gap", args, tmp_path, monkeypatch)
    result = json.loads((tmp_path / "fit_gap.json").read_text())
    assert [e["steps"] for e in result["per_epoch"]] == [4, 4]
    for epoch in result["per_epoch"]:
        assert epoch["val_s"] > 0  # the CLI fit validates every epoch
        assert epoch["checkpoint_s"] > 0  # and saves best and last
        assert epoch["turnover_s"] >= epoch["checkpoint_s"]
        # host clocks on a CPU fit: the three steps after the first; of the three gaps of four
        # steps, the first apart (it follows the probe's synchronisation) and the other two
        assert 0 < epoch["step_ms"] < epoch["steps_s"] * 1000.0
        assert 0 < epoch["first_gap_ms"] < epoch["steps_s"] * 1000.0
        assert 0 < epoch["between_ms"] < epoch["steps_s"] * 1000.0
        assert epoch["step_ms"] <= epoch["step_max_ms"]
        assert 0 < epoch["host_wait_mean_ms"] <= epoch["host_wait_max_ms"]
        assert epoch["gc_count"] >= epoch["gc_full"] >= 0
        assert epoch["late_check_waits"] == 0  # a native update is checked before it runs
    assert result["epochs"] == 1
    assert "training_step" in (tmp_path / "first_steps.txt").read_text()
    assert "save_checkpoint" in (tmp_path / "turnover.txt").read_text()


def test_probe_fit_gap_reads_the_loss_guard_s_waits(tool: ModuleType) -> None:
    module = SimpleNamespace(loss_guard=SimpleNamespace(waits=5))
    assert tool._late_check_waits(module) == 5.0
    assert tool._late_check_waits(SimpleNamespace()) == 0.0  # a module without a guard
