"""A replayed region under DistributedDataParallel: two gloo ranks, bitwise equal to native DDP.

DDP reduces gradients from hooks on each parameter's ``AccumulateGrad`` node; the recorder hands
its gradients to those same nodes, so the hooks fire, ``no_sync`` micro-batches accumulate
locally and the synchronised one is all-reduced (docs/engineering/multi-gpu.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ddp_ranks import ddp_train
from gloo_ranks import run_ranks

from lucid_yolo.replay import first_difference

STEPS = 3


@pytest.mark.slow
@pytest.mark.parametrize(
    ("accumulation", "warmup"),
    [(1, 1), (2, 1), (2, 2)],
    ids=["acc1", "acc2-record-synced", "acc2-record-under-no-sync"],
)
def test_ddp_replayed_region_matches_native_ddp_on_every_rank(
    tmp_path: Path, accumulation: int, warmup: int
) -> None:
    (tmp_path / "native").mkdir()
    (tmp_path / "replay").mkdir()
    native = run_ranks(ddp_train, 2, tmp_path / "native", False, accumulation, STEPS, warmup)
    replayed = run_ranks(ddp_train, 2, tmp_path / "replay", True, accumulation, STEPS, warmup)
    for rank in range(2):
        assert first_difference(native[rank][0], replayed[rank][0]) is None, f"rank {rank}"
        # the recorder warms up natively, then replays every later call
        assert replayed[rank][1] == STEPS * accumulation - warmup
    # the ranks trained on different data: equal weights show the all-reduce ran (BatchNorm
    # statistics stay per rank: DDP broadcasts rank 0's before each forward, which updates them)
    weights = [
        {k: v for k, v in rank[0].items() if k.startswith("net.") and ".bn.running" not in k}
        for rank in native
    ]
    assert weights[0] == weights[1]
