"""The metric benchmark: saved inputs are reusable and timed through the evaluator."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType

import pytest
import torch
from tool_modules import load_tool


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("bench_metric_update", monkeypatch)


def test_saved_inputs_time_the_evaluator(bench: ModuleType, tmp_path: Path) -> None:
    args = argparse.Namespace(images=2, imgsz=64, batch=1)
    path = tmp_path / "detect.pt"
    bench.save_inputs("detect", args, path)
    saved = torch.load(path, weights_only=False)
    assert len(saved["batches"]) == 2
    assert "o2o.cls" in saved["batches"][0][0]
    seconds = bench.time_metric(path, "detect", repeats=2)
    assert seconds["total"] >= seconds["update"] > 0.0
    assert 0.0 <= seconds["fitness"] <= 1.0


def test_operations_are_counted_on_the_device_path_and_the_shortcuts_restored(
    bench: ModuleType, tmp_path: Path
) -> None:
    args = argparse.Namespace(images=4, imgsz=64, batch=2)
    path = tmp_path / "detect.pt"
    bench.save_inputs("detect", args, path)
    before = bench.host_shortcuts.taken
    counts = bench.count_operations(path, "detect")
    assert counts["per_image"] > 0
    phases = {name.lstrip("_") for name in bench.PHASES} - {"update_batch"}  # masks only
    assert set(counts) == {"per_image", *phases}
    assert all(counts[phase] > 0 for phase in phases), counts
    # the scoring holds the top-k, the source transforms and the metric's scoring; it and
    # add_scored are parts of the update, which also dispatches operations of its own
    parts = ("top_k", "source_predictions", "source_targets", "score_batch")
    assert counts["score"] >= sum(counts[phase] for phase in parts)
    assert counts["score"] + counts["add_scored"] <= counts["per_image"] * args.batch
    assert bench.host_shortcuts.taken is before
