"""A replayed region under DistributedDataParallel: two gloo ranks, bitwise equal to native DDP.

DDP reduces gradients from hooks on each parameter's ``AccumulateGrad`` node; the recorder hands
its gradients to those same nodes, so the hooks fire, ``no_sync`` micro-batches accumulate
locally and the synchronised one is all-reduced (docs/engineering/multi-gpu.md).
"""

from __future__ import annotations

import pytest
from ddp_ranks import ddp_train_runs
from gloo_ranks import run_ranks

from lucid_yolo.replay import first_difference

STEPS = 3

CASES = {"acc1": (1, 1), "acc2-record-synced": (2, 1), "acc2-record-under-no-sync": (2, 2)}
"""``(accumulation, warmup)`` by case id."""

Run = tuple[dict[str, str], int]
"""One rank's run: the state digest and the replays made."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], list[Run]]:
    """Every case, native and replayed, by ``(case, replay)``: each rank's run.

    All of them run in one pair of spawned ranks (a spawn costs its imports), each run with its
    own DDP wrapper, optimizer and generators, as in a pair of its own.
    """
    keys = [(case, replay) for case in CASES for replay in (False, True)]
    plan = []
    for case, replay in keys:
        accumulation, warmup = CASES[case]
        plan.append((replay, accumulation, STEPS, warmup))
    ranks = run_ranks(ddp_train_runs, 2, tmp_path_factory.mktemp("ddp"), plan)
    return {key: [ranks[rank][index] for rank in range(2)] for index, key in enumerate(keys)}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_ddp_replayed_region_matches_native_ddp_on_every_rank(
    runs: dict[tuple[str, bool], list[Run]], case: str
) -> None:
    accumulation, warmup = CASES[case]
    native, replayed = runs[case, False], runs[case, True]
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
