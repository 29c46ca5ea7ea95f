"""The side-by-side tool reads each trainer's per-epoch metrics and tabulates them per kind."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import ModuleType

import pytest
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("bench_side_by_side", monkeypatch)


def test_epoch_metrics_of_ultralytics_come_from_results_csv(
    tmp_path: Path, tool: ModuleType
) -> None:
    results = tmp_path / "train" / "results.csv"
    results.parent.mkdir()
    # Ultralytics writes one row per epoch, counted from 1
    results.write_text(
        "epoch,time,metrics/mAP50(B),metrics/mAP50-95(B),metrics/mAP50-95(M)\n"
        "1,10.5,0.2,0.05,0.03\n"
        "2,20.5,0.4,0.15,0.13\n"
    )
    rows = tool._epoch_metrics("segment", "ultralytics", tmp_path, tmp_path / "none.jsonl")
    assert rows == [
        {"epoch": 0, "fit_s": 10.5, "box": 0.05, "mask": 0.03},
        {"epoch": 1, "fit_s": 20.5, "box": 0.15, "mask": 0.13},
    ]


def test_epoch_metrics_of_obb_ultralytics_are_rotated_boxes(
    tmp_path: Path, tool: ModuleType
) -> None:
    results = tmp_path / "train" / "results.csv"
    results.parent.mkdir()
    results.write_text("epoch,time,metrics/mAP50-95(B)\n1,3.0,0.5\n")
    rows = tool._epoch_metrics("obb", "ultralytics", tmp_path, tmp_path / "none.jsonl")
    assert rows == [{"epoch": 0, "fit_s": 3.0, "obb": 0.5}]


def test_epoch_metrics_of_lucid_yolo_come_from_the_probe_lines(
    tmp_path: Path, tool: ModuleType
) -> None:
    lines = tmp_path / "pose.epochs.jsonl"
    records = [
        {"epoch": 0, "fit_s": 4.0, "val/box/mAP50-95": 0.1, "val/pose/mAP50-95": 0.02},
        {"epoch": 1, "fit_s": 8.0, "val/box/mAP50-95": 0.3, "val/pose/mAP50": 0.5},
    ]
    lines.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    rows = tool._epoch_metrics("pose", "native", tmp_path, lines)
    assert rows == [
        {"epoch": 0, "fit_s": 4.0, "box": 0.1, "pose": 0.02},
        {"epoch": 1, "fit_s": 8.0, "box": 0.3},
    ]


def test_accuracy_table_gives_each_tool_its_last_epoch_per_kind(tool: ModuleType) -> None:
    records = [
        {
            "task": "segment",
            "tool": "ultralytics",
            "epoch_metrics": [{"epoch": 0, "fit_s": 9.0, "box": 0.1, "mask": 0.05}],
        },
        {
            "task": "segment",
            "tool": "native",
            "epoch_metrics": [
                {"epoch": 0, "fit_s": 5.0, "box": 0.2, "mask": 0.1},
                {"epoch": 1, "fit_s": 10.0, "box": 0.4, "mask": 0.3},
            ],
        },
    ]
    args = argparse.Namespace(
        batch=16, epochs=2, imgsz=320, images=512, val_images=128, lucid_args=""
    )
    table = tool.accuracy_table(records, args)
    assert "| segment | box | 0.100 | 0.400 | 1 (9 s) / 2 (10 s) |" in table
    assert "| segment | mask | 0.050 | 0.300 | 1 (9 s) / 2 (10 s) |" in table
    assert "| 1 | — | 0.300 |" in table


def _settings(**changes: object) -> argparse.Namespace:
    settings: dict[str, object] = {
        "batch": 16, "epochs": 30, "imgsz": 640, "images": 512, "val_images": 128,
        "device": "cuda", "workers": None, "ultralytics_cache": False, "lucid_args": "",
        "own_environments": None, "substitute": [],
    }  # fmt: skip
    settings.update(changes)
    return argparse.Namespace(**settings)


def _earlier_call(path: Path, args: argparse.Namespace, runs: list[dict[str, object]]) -> Path:
    saved = {k: str(v) for k, v in vars(args).items()}
    path.write_text(json.dumps({"args": saved, "runs": runs, "rows": []}))
    return path


def test_merge_joins_the_runs_of_an_earlier_call_with_the_same_settings(
    tmp_path: Path, tool: ModuleType
) -> None:
    first = [{"task": "detect", "tool": "replay", "whole_s": 100.0}]
    second = [{"task": "detect", "tool": "native", "whole_s": 140.0}]
    paths = [
        _earlier_call(tmp_path / "a.json", _settings(), first),
        _earlier_call(tmp_path / "b.json", _settings(), second),
    ]
    assert tool.merged_runs(paths, _settings()) == first + second


def test_merge_refuses_an_earlier_call_with_another_batch(tmp_path: Path, tool: ModuleType) -> None:
    path = _earlier_call(tmp_path / "a.json", _settings(batch=4), [])
    with pytest.raises(SystemExit, match="batch was '4' there and is '16' here"):
        tool.merged_runs([path], _settings())


@pytest.mark.parametrize("history_here", [True, False])
def test_merge_refuses_runs_whose_times_the_memory_history_voids(
    tmp_path: Path, tool: ModuleType, history_here: bool
) -> None:
    earlier = _settings(memory_history=0 if history_here else 100)
    path = _earlier_call(tmp_path / "a.json", earlier, [])
    with pytest.raises(SystemExit, match="--memory-history has void times"):
        tool.merged_runs([path], _settings(memory_history=100 if history_here else 0))


def test_merge_refuses_a_file_that_is_not_a_report(tmp_path: Path, tool: ModuleType) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(SystemExit, match=r"broken\.json: not a side_by_side\.json"):
        tool.merged_runs([path], _settings())


def test_bytecode_cache_is_shared_by_every_child_and_overrides_dont_write(
    tmp_path: Path, tool: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    args = argparse.Namespace(bytecode_cache=tmp_path / "pyc", own_environments=None)
    env = tool.child_environment(args, "replay")
    assert env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "pyc")
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["PYTHONPATH"].split(":")[0] == str(tool.TOOLS_DIR)


def test_without_a_bytecode_cache_children_keep_the_callers_bytecode_settings(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    env = tool.child_environment(
        argparse.Namespace(bytecode_cache=None, own_environments=None), "replay"
    )
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert "PYTHONPYCACHEPREFIX" not in env


def test_synthetic_set_is_rendered_once_per_set_of_counts(tmp_path: Path, tool: ModuleType) -> None:
    first = tool.synthetic_set(tmp_path, "detect", 2, 1, 64)
    image = first.parent / "images" / "train" / "000000.jpg"
    image.write_bytes(b"kept: a second call does not render")
    assert tool.synthetic_set(tmp_path, "detect", 2, 1, 64) == first
    assert image.read_bytes() == b"kept: a second call does not render"
    other = tool.synthetic_set(tmp_path, "detect", 2, 2, 64)
    assert other.parent != first.parent
    assert sorted(p.name for p in (other.parent / "images" / "val").iterdir()) == [
        "000000.jpg",
        "000001.jpg",
    ]


@pytest.mark.parametrize("entries", [0, 1000])
def test_table_says_when_the_allocator_history_voids_the_times(
    tool: ModuleType, entries: int
) -> None:
    heading = tool.table([], _settings(memory_history=entries)).splitlines()[0]
    assert ("times void" in heading) == bool(entries)


def test_merge_refuses_runs_of_the_other_environment(tmp_path: Path, tool: ModuleType) -> None:
    path = _earlier_call(tmp_path / "a.json", _settings(), [])
    with pytest.raises(SystemExit, match="own_environments was 'None' there"):
        tool.merged_runs([path], _settings(own_environments=tmp_path / "envs"))


def test_a_report_from_before_own_environments_merges_as_the_machines_environment(
    tmp_path: Path, tool: ModuleType
) -> None:
    saved = {
        k: str(v)
        for k, v in vars(_settings()).items()
        if k not in ("own_environments", "substitute")
    }
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"args": saved, "runs": [{"tool": "replay"}], "rows": []}))
    assert tool.merged_runs([path], _settings()) == [{"tool": "replay"}]


def test_substitutes_saved_as_given_merge_with_substitutes_parsed_into_pairs(
    tmp_path: Path, tool: ModuleType
) -> None:
    envs = tmp_path / "envs"
    given = _settings(own_environments=envs, substitute=["opencv-python=opencv-python-headless"])
    path = _earlier_call(tmp_path / "a.json", given, [{"tool": "replay"}])
    parsed = _settings(
        own_environments=envs, substitute=[("opencv-python", "opencv-python-headless")]
    )
    assert tool.merged_runs([path], parsed) == [{"tool": "replay"}]
    other = _settings(own_environments=envs, substitute=[("opencv-python", "opencv-contrib")])
    with pytest.raises(SystemExit, match="substitute was"):
        tool.merged_runs([path], other)
    broken = json.loads(path.read_text())
    broken["args"]["substitute"] = "[opencv-python=opencv"
    path.write_text(json.dumps(broken))
    with pytest.raises(SystemExit, match="is not a list"):
        tool.merged_runs([path], parsed)


@pytest.mark.parametrize("tool_name", ["replay", "native", "ultralytics"])
def test_in_its_own_environment_a_tool_sees_no_library_of_the_callers_path(
    tmp_path: Path, tool: ModuleType, monkeypatch: pytest.MonkeyPatch, tool_name: str
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/tmp/site:/image/extras")
    environments = {
        name: {"python": str(tmp_path / name / "bin" / "python")}
        for name in ("lucid", "ultralytics")
    }
    args = argparse.Namespace(
        bytecode_cache=None, own_environments=tmp_path, environments=environments
    )
    path = tool.child_environment(args, tool_name)["PYTHONPATH"].split(":")
    sources = [str(s) for s in tool.SOURCES]
    assert path == [str(tool.TOOLS_DIR), *([] if tool_name == "ultralytics" else sources)]
    assert len(sources) == 4
    expected = "ultralytics" if tool_name == "ultralytics" else "lucid"
    assert tool.tool_python(tool_name, args) == str(tmp_path / expected / "bin" / "python")


def test_without_own_environments_every_tool_runs_this_interpreter(tool: ModuleType) -> None:
    import sys

    args = argparse.Namespace(own_environments=None)
    assert {tool.tool_python(t, args) for t in ("replay", "ultralytics")} == {sys.executable}


def test_compile_folders_name_each_linked_folder_for_compileall(
    tmp_path: Path, tool: ModuleType
) -> None:
    real = tmp_path / "real" / "torch"
    real.mkdir(parents=True)
    site = tmp_path / "site"
    site.mkdir()
    (site / "torch").symlink_to(real)
    (site / "module.py").write_text("")
    (site / "plain").mkdir()
    folders = tool.compile_folders([str(site), str(tmp_path / "absent"), str(site)])
    assert folders == [str(site), str(site / "torch")]


@pytest.mark.parametrize(("own", "words"), [(True, "own dependency closure"), (False, "machine's")])
def test_table_says_which_environment_the_tools_ran_in(
    tmp_path: Path, tool: ModuleType, own: bool, words: str
) -> None:
    heading = tool.table([], _settings(own_environments=tmp_path if own else None)).splitlines()[0]
    assert words in heading


def test_an_environment_that_cannot_be_built_stops_the_run_with_its_reason(
    tmp_path: Path, tool: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dependency_closure

    def refuse(*_: object) -> None:
        raise dependency_closure.ClosureError("lcz 1.0: no RECORD of its files")

    monkeypatch.setattr(dependency_closure, "environment_for", refuse)
    args = argparse.Namespace(own_environments=tmp_path, substitute=[])
    with pytest.raises(SystemExit, match=r"the lucid environment: lcz 1\.0: no RECORD"):
        tool.own_environments(["replay", "ultralytics"], args)


def test_shares_leave_the_span_between_steps_out_of_the_step_and_report_its_own(
    tool: ModuleType,
) -> None:
    from lucid_yolo.train.callbacks import BETWEEN_STEPS

    assert f"{BETWEEN_STEPS}_ms" == tool.BETWEEN_KEY
    phases = {"data_ms": 2.0, "network_ms": 10.0, "backward_ms": 6.0, "update_ms": 2.0}
    record = {
        "phases_ms": [{**phases, tool.BETWEEN_KEY: 1.0} for _ in range(4)],
        "epochs": [{"wall_s": 2.0, "steps": 50}] * 4,
    }
    shares = tool._lucid_shares(record)
    assert shares["step_ms"] == 20.0  # the phases only
    assert shares["data_share"] == 0.1
    assert shares["step_between_steps_ms"] == 1.0
    assert shares["between_share"] == pytest.approx(1.0 / 19.0)  # of the device's period
    assert shares["outside_share"] == pytest.approx(0.5)
    del record["phases_ms"][0][tool.BETWEEN_KEY]
    assert "between_share" in tool._lucid_shares(record)  # the later half still has it
    record["phases_ms"] = [phases] * 4
    assert "between_share" not in tool._lucid_shares(record)  # fits from before it


def test_shares_give_the_later_passes_median_spans_outside_the_steps(tool: ModuleType) -> None:
    record = {
        "phases_ms": [{"network_ms": 10.0}] * 4,
        "epochs": [{"wall_s": 2.0, "steps": 100}] * 4,
        "outside_split": [
            {"batches_s": 9.0, "after_validation_s": 9.0},  # the earlier half: left out
            {"batches_s": 9.0, "after_validation_s": 9.0},
            {"batches_s": 0.2, "after_validation_s": 0.1},
            {"batches_s": 0.3, "after_validation_s": 0.3},
            {"batches_s": 0.1},  # the fit's last pass
        ],
    }
    split = tool._lucid_shares(record)["outside_split_s"]
    assert split["batches_s"] == pytest.approx(0.2)
    assert split["after_validation_s"] == pytest.approx(0.2)  # over the passes that have it
    del record["outside_split"]
    assert "outside_split_s" not in tool._lucid_shares(record)  # fits from before the split


def test_table_gives_a_lucid_row_its_step_and_shares(tool: ModuleType) -> None:
    row = {
        "task": "detect",
        "tool": "replay",
        "runs": 1,
        "whole_s": {"median": 91.3, "min": 91.3, "max": 91.3},
        "train_img_per_s": {"median": 211.3},
        "val_s": {"median": 9.0},
        "startup_s": {"median": 9.1},
        "peak_reserved_gib": {"median": 0.98},
        "mAP50-95": 0.997,
        "speedup_vs_ultralytics": 4.58,
    }
    shares = {"step_ms": 18.32, "data_share": 0.116, "outside_share": 0.074}
    older = tool.table([{**row, "phases": shares}], _settings()).splitlines()[-1]
    assert older.endswith("| 18.3: 11.6 %, —; 7.4 % |")
    newer = {**row, "phases": {**shares, "between_share": 0.041}}
    line = tool.table([newer], _settings()).splitlines()[-1]
    assert line.endswith("| 18.3: 11.6 %, 4.1 %; 7.4 % |")
    ultralytics = {**row, "tool": "ultralytics"}
    assert tool.table([ultralytics], _settings()).splitlines()[-1].endswith("| 0.997 | — |")
