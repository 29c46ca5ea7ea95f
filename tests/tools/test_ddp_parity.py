"""Replay under Lightning's DDP: two gloo processes, every region replayed, bitwise native DDP.

Runs ``tools/ddp_parity.py`` as the GPU run does, on the CPU (the regions use their CPU
stand-in), and reads its rows: for each rank, the replayed fit's weights, EMA, optimizer,
schedule, per-step losses and validation metrics equal the native fit's, and every region
really replayed (a region that retired or never recorded would make the comparison vacuous).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tool_modules import load_tool, run_tool_main


@pytest.mark.slow
def test_ddp_parity_network_loss_update_replayed_bitwise_on_every_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the tool sets these when it loads; set here first, they are undone after the test
    for name, value in load_tool("multi_gpu_env", monkeypatch).MULTICAST_OFF.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "ddp_parity.json"
    # accumulation 2 alone: each case is two 2-process fits, and 2 covers the per-micro-batch
    # regions and the update's once-per-step replay both
    args = "--accelerator cpu --devices 2 --precisions 32-true --tasks detect --accumulations 2"
    args += f" --regions network loss update --out {out}"
    assert run_tool_main("ddp_parity", args, tmp_path, monkeypatch, data_root=False) == 0
    rows = {row["case"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"detect/32-true/acc2"}
    # 4 optimizer steps; each region warms up natively on its first call and replays the rest
    micro_batches = {"detect/32-true/acc2": 8}
    for name, row in rows.items():
        assert row["ranks_agree"], name
        assert [r["rank"] for r in row["ranks"]] == [0, 1]
        for rank in row["ranks"]:
            assert rank["first_difference"] is None, (name, rank)
            assert rank["losses_equal"], (name, rank)
            assert rank["val_equal"], (name, rank)
            # the network and its loss replay as one region by default
            assert rank["replays"] == {
                "network+loss": micro_batches[name] - 1,
                "optimizer MuSGD": 3,
            }, (name, rank)
            assert not any(rank["retired"].values()), (name, rank)
