"""The fit-gap probe splits a CLI fit's epochs at their hooks, on a CPU too."""

from __future__ import annotations

import argparse
import gc
import json
import sys
import threading
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from tool_modules import load_tool, run_tool_main

from lucid_yolo.train.callbacks import SetUpObjectsFrozen


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("probe_fit_gap", monkeypatch)


def _epoch(
    steps: int, steps_s: float, turnover_s: float, step_ms: float = 9.0, between_ms: float = 1.0
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
        **{f"step{stat}_ms": step_ms for stat in ("", "_mean", "_p90", "_max")},
        **{f"between{stat}_ms": between_ms for stat in ("", "_mean", "_p90", "_max")},
        "first_gap_ms": 30.0,
    }


def test_probe_fit_gap_summary_leaves_the_first_epoch_out(tool: ModuleType) -> None:
    epochs = [
        _epoch(11, 5.0, 9.0, step_ms=500.0),
        _epoch(11, 0.2, 0.3, between_ms=2.0),
        _epoch(11, 0.2, 0.5),
        _epoch(11, 0.2, 0.5, step_ms=7.0, between_ms=4.0),
    ]
    result = tool.summary(epochs)
    assert (result["epochs"], result["steps"]) == (3, 33)
    assert result["train_s"] == pytest.approx(0.1 + 0.2 + 0.3 + 2 * (0.1 + 0.2 + 0.5))
    assert result["per_step_ms"]["turnover_s"] == pytest.approx(1300.0 / 33)
    assert result["per_step_ms"]["val_s"] == pytest.approx(6000.0 / 33)
    assert result["steady_period_ms"] == pytest.approx(20.0)
    timeline = result["device_timeline_ms"]
    assert (timeline["step_ms"], timeline["between_ms"]) == (9.0, 2.0)
    text = tool.table(result)
    assert "| turnover_s | 39.39 | 1.300 |" in text
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
        try:
            freeze.on_train_start(trainer, None)  # type: ignore[arg-type]
            assert (gc.get_freeze_count() > 0) is not asked
        finally:
            freeze.teardown(trainer, None, "fit")  # type: ignore[arg-type]
            gaps.teardown(trainer, None, "fit")
        assert gc.get_freeze_count() == 0


def test_probe_fit_gap_refuses_a_switch_interval_of_zero(tool: ModuleType) -> None:
    assert tool._positive_seconds("0.0005") == 0.0005
    with pytest.raises(argparse.ArgumentTypeError, match="more than 0 s"):
        tool._positive_seconds("0")


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


def test_probe_fit_gap_times_the_checkpoint_writes_while_attached(
    tool: ModuleType, tmp_path: Path
) -> None:
    from lucid_yolo.train.callbacks import atomic_checkpoint_io as io

    original = io.atomic_save
    writes = tool.CheckpointWrites()
    writes.attach()
    try:
        before = time.perf_counter()
        io.atomic_save({"step": 1}, tmp_path / "a.ckpt")
        io.atomic_link(tmp_path / "a.ckpt", tmp_path / "b.ckpt")
        after = time.perf_counter()
    finally:
        writes.detach()
    assert io.atomic_save is original
    (start, end), _ = writes.intervals
    assert start is not None
    assert end is not None
    assert before <= start <= end <= after
    assert writes.during(start)
    assert not writes.during(before - 1.0)
    taken = writes.take_finished()
    assert taken["writes"] == 2
    assert taken["write_ms"] > 0
    assert writes.take_finished()["writes"] == 0
    io.atomic_save({"step": 2}, tmp_path / "c.ckpt")
    assert writes.intervals == []  # detached: not timed


def test_probe_fit_gap_takes_the_finished_writes_while_another_runs(tool: ModuleType) -> None:
    release = threading.Event()
    writes = tool.CheckpointWrites()
    quick = writes._timed(lambda: None)
    slow = writes._timed(release.wait)
    quick()
    writer = threading.Thread(target=slow)
    writer.start()
    while len(writes.intervals) < 2:
        time.sleep(0.001)
    assert writes.take_finished()["writes"] == 1  # the slow one runs on
    assert writes.during(time.perf_counter())
    release.set()
    writer.join()
    assert writes.take_finished()["writes"] == 1
    assert writes.intervals == []


def test_probe_fit_gap_sets_the_switch_interval_only_when_asked(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = sys.getswitchinterval()
    trainer = SimpleNamespace(save_checkpoint=lambda *args, **kwargs: None)
    gaps = tool.FitGaps()
    monkeypatch.delenv(tool.SWITCH_INTERVAL_ENV, raising=False)
    try:
        gaps.setup(trainer, None, "fit")
        gaps.teardown(trainer, None, "fit")
        assert sys.getswitchinterval() == before
        monkeypatch.setenv(tool.SWITCH_INTERVAL_ENV, "0.0005")
        gaps.setup(trainer, None, "fit")
        gaps.teardown(trainer, None, "fit")
        assert sys.getswitchinterval() == pytest.approx(0.0005)
    finally:
        sys.setswitchinterval(before)


def test_probe_fit_gap_table_names_the_steps_during_the_writes(tool: ModuleType) -> None:
    written = {
        "writes": 2,
        "write_ms": 120.0,
        "steps_writing": 3,
        "step_max_writing_ms": 80.0,
        "step_max_quiet_ms": 30.0,
    }
    epochs = [_epoch(3, 0.2, 0.3)] + [{**_epoch(3, 0.2, 0.3), **written}] * 3
    text = tool.table(tool.summary(epochs))
    assert (
        "checkpoint writes (medians over epochs): 2, 120.0 ms, 3 steps started during them; "
        "longest step during a write 80.00 ms, outside one 30.00 ms"
    ) in text


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
        assert epoch["steps_writing"] >= 0
    # best and last after the first epoch, at least last after the second, on the writer
    # thread; Lightning's strategy teardown waits for them before the probe's last look
    assert sum(e["writes"] for e in result["per_epoch"]) >= 3
    assert result["epochs"] == 1
    assert "training_step" in (tmp_path / "first_steps.txt").read_text()
    assert "save_checkpoint" in (tmp_path / "turnover.txt").read_text()
