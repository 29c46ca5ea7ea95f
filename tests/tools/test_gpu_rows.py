"""tools/gpu_rows.sh: issue 11's goal table in one command (its commands, read dry)."""

from __future__ import annotations

import inspect
import os
import subprocess
from pathlib import Path

import pytest

from lucid_yolo.train import YoloModule

TOOL = Path(__file__).parents[2] / "tools" / "gpu_rows.sh"


def dry_run(**variables: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("ROWS", "ROUNDS", "TOOLS")}
    return subprocess.run(
        ["bash", str(TOOL)],
        env={**environment, "DRY_RUN": "1", "OUT": "/o", **variables},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_each_round_merges_the_one_before_and_only_the_first_fit_warms_the_machine() -> None:
    lines = dry_run(ROWS="detect-b16 segment-b4", ROUNDS="2").stdout.splitlines()
    rounds = [line for line in lines if "EPOCHS=3" not in line and "gpu_speed.sh" in line]
    assert [line.split("ROW=")[1].split()[0] for line in rounds] == [
        "detect-b16",
        "detect-b16",
        "segment-b4",
        "segment-b4",
    ]
    assert "WARM_UP=1 MERGE= OUT=/o/speed-0" in rounds[0]
    assert "WARM_UP=0 MERGE=/o/speed-0/detect-b16/side_by_side.json OUT=/o/speed-1" in rounds[1]
    assert "WARM_UP=0 MERGE= OUT=/o/speed-0" in rounds[2]  # a new row starts its own report
    assert all("ENVIRONMENTS=own" in line and "TOOLS=ultralytics,replay" in line for line in rounds)


def test_the_readings_take_each_rows_last_round_and_its_memory_pair() -> None:
    lines = dry_run(ROWS="detect-b4", ROUNDS="3").stdout.splitlines()
    memory = [line for line in lines if "EPOCHS=3" in line]
    assert memory == [
        "env ENVIRONMENTS=own ROW=detect-b4 EPOCHS=3 TOOLS=replay,native WARM_UP=0 OUT=/o/memory "
        "bash tools/gpu_speed.sh"
    ]
    assert any("bench_memory_format.py" in line and "--out /o/graphed" in line for line in lines)
    assert lines[-1] == (
        "python3 tools/fit_readings.py /o/speed-2/detect-b4/side_by_side.json "
        "/o/memory/detect-b4/side_by_side.json > /o/rows.md"
    )


def test_tools_given_reach_the_rows_and_not_the_memory_pairs() -> None:
    lines = dry_run(ROWS="detect-b16", TOOLS="ultralytics,replay,native").stdout.splitlines()
    assert "TOOLS=ultralytics,replay,native" in lines[0]
    assert all("TOOLS=replay,native " in line for line in lines if "EPOCHS=3" in line)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"ROWS": "detect-b8"}, "detect-b8 is not a row"),
        ({"ROUNDS": "0"}, "at least 1"),
        ({"ROUNDS": "two"}, "a whole number"),
    ],
)
def test_a_wrong_setting_is_refused_before_any_fit(variables: dict[str, str], message: str) -> None:
    refused = dry_run(**variables)
    assert refused.returncode == 2
    assert message in refused.stderr
    assert refused.stdout == ""


@pytest.mark.parametrize(
    ("rows", "graphed"),
    [
        ("segment-b4", "--models yolo26n-seg --batch 4 "),
        ("detect-b16 detect-b4", "--models yolo26n --batch 16 4 "),
        ("detect-b4 segment-b4", "--models yolo26n yolo26n-seg --batch 4 "),
    ],
)
def test_the_graphed_pairs_are_the_nets_and_batches_of_the_rows_asked_for(
    rows: str, graphed: str
) -> None:
    lines = dry_run(ROWS=rows).stdout.splitlines()
    (line,) = [line for line in lines if "bench_memory_format.py" in line]
    assert graphed in line


def test_the_graphed_pairs_run_the_net_as_the_fits_do() -> None:
    # the step ratio divides a fit's step by this pair: a pair without the fits' casts read
    # segment's ratio as 1.61 where the like-for-like pair gives about 1.69 (session 51)
    default = inspect.signature(YoloModule).parameters["casts_weights_together"].default
    layout = "channels_last+casts-together" if default else "channels_last"
    (line,) = [line for line in dry_run().stdout.splitlines() if "bench_memory_format.py" in line]
    assert f"--layouts {layout} " in line
