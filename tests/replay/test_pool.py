"""CPU tests of the shared pool: which graphs hold it, and when a warm-up borrows it.

On the CPU stand-in the routing itself is a no-op, so these tests watch the calls that route and
the allocator reading that checks the warm-up (``live_blocks``); what CUDA does with them is in
``tests/replay/test_gpu_memory.py``.
"""

from __future__ import annotations

import gc

import pytest
import torch
from replay_nets import log_pool_routing
from torch import Tensor

from lucid_yolo.replay import PoolLeakError, ReplayPool, ScratchLoan
from lucid_yolo.replay._graphs import RegionGraphs
from lucid_yolo.replay.leak_evidence import drain_autograd_worker
from lucid_yolo.replay.pool import OpenForward


def _captured(pool: ReplayPool) -> RegionGraphs:
    weight = torch.ones(3, requires_grad=True)

    def forward() -> tuple[Tensor, ...]:
        return ((weight * 2.0).sum(),)

    graphs = RegionGraphs(pool)
    graphs.capture(forward, {})
    return graphs


def _count_routing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    events: list[str] = []
    log_pool_routing(monkeypatch, events)
    return events


def _open_replays_between_loan(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[list[str], ReplayPool, RegionGraphs, ScratchLoan]:
    """A pool that a capture holds, its routing logged, and an open loan that lets graphs
    replay between its blocks."""
    events = _count_routing(monkeypatch)
    pool = ReplayPool("cpu")
    graphs = _captured(pool)
    loan = ScratchLoan(pool, replays_between=True)
    loan.open()
    return events, pool, graphs, loan


def test_pool_holds_graphs_while_a_capture_lives() -> None:
    pool = ReplayPool("cpu")
    assert not pool.holds_graphs
    graphs = _captured(pool)
    assert pool.holds_graphs
    del graphs
    gc.collect()
    assert not pool.holds_graphs


def test_pool_warm_up_routes_only_while_graphs_hold_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = _count_routing(monkeypatch)
    pool = ReplayPool("cpu")
    with pool.warm_up(into_pool=True):
        events.append("body")
    graphs = _captured(pool)
    with pool.warm_up(into_pool=False):
        events.append("body")
    with pool.warm_up(into_pool=True):
        events.append("body")
    assert events == ["body", "body", "route", "body", "unroute"]
    assert graphs.static_outputs


def test_pool_warm_up_raises_when_a_block_outlives_it(monkeypatch: pytest.MonkeyPatch) -> None:
    before, after = frozenset({(0, 512)}), frozenset({(0, 512), (512, 1024)})
    readings = iter([before, after, after])  # before, after, and after collecting cycles
    monkeypatch.setattr(ReplayPool, "live_blocks", lambda self: next(readings))
    pool = ReplayPool("cpu")
    graphs = _captured(pool)
    leak = r"1 block\(s\) .* still alive \(1024 bytes\)"
    with pytest.raises(PoolLeakError, match=leak), pool.warm_up(into_pool=True):
        pass
    assert graphs.static_outputs


def test_pool_warm_up_forgives_a_block_that_only_a_reference_cycle_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readings = iter([frozenset(), frozenset({(0, 512)}), frozenset()])
    monkeypatch.setattr(ReplayPool, "live_blocks", lambda self: next(readings))
    pool = ReplayPool("cpu")
    graphs = _captured(pool)
    with pool.warm_up(into_pool=True):
        pass
    assert next(readings, None) is None  # read before, after, and after collecting cycles
    assert graphs.static_outputs


def test_pool_warm_up_forgives_a_block_that_autograd_s_worker_still_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The worker thread of a CUDA backward lets go of the gradients it handed back just after
    # the caller has them; the check waits for it before it calls a block a leak.
    drained: list[torch.device] = []
    monkeypatch.setattr("lucid_yolo.replay.pool.drain_autograd_worker", drained.append)
    monkeypatch.setattr(
        ReplayPool, "live_blocks", lambda self: frozenset() if drained else frozenset({(0, 512)})
    )
    pool = ReplayPool("cpu")
    pool._raise_if_left(frozenset(), during="a warm-up", why="why", remedy="remedy")
    assert drained == [pool.device]


def test_pool_leak_names_the_frames_outside_the_libraries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frames = [
        {
            "filename": "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
            "line": 1,
            "name": "_call_impl",
        },
        {"filename": "/work/project/heads.py", "line": 42, "name": "forward"},
        {"filename": "/work/project/train.py", "line": 7, "name": "step"},
    ]
    # without history a block has no frames; with it, a C++ thread's block has none outside
    # the libraries
    segment = {
        "address": 1024,
        "blocks": [{"size": 512}, {"size": 512, "frames": frames}, {"size": 512, "frames": []}],
    }
    segments = [segment]
    monkeypatch.setattr("lucid_yolo.replay.pool._pool_segments", lambda handle: segments)
    pool = ReplayPool("cpu")
    pool.uses_cuda = True
    sites = pool._allocation_sites(frozenset({(1536, 512)}))
    assert (
        sites
        == "Allocated at: /work/project/heads.py:42 (forward) < /work/project/train.py:7 (step)"
    )
    assert "_record_memory_history" in pool._allocation_sites(frozenset({(1024, 512)}))
    assert "no Python frame outside the libraries" in pool._allocation_sites(
        frozenset({(2048, 512)})
    )
    segments[:] = [{"blocks": [{"size": 512}]}]  # an entry this reading does not know
    assert "_record_memory_history" in pool._allocation_sites(frozenset({(1024, 512)}))


def test_drain_autograd_worker_returns_with_grad_mode_as_it_was() -> None:
    with torch.inference_mode():
        drain_autograd_worker(torch.device("cpu"))
        assert torch.is_inference_mode_enabled()
    with torch.no_grad():
        drain_autograd_worker(torch.device("cpu"))
        assert not torch.is_grad_enabled()


def test_scratch_loan_lends_only_while_graphs_hold_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = _count_routing(monkeypatch)
    pool = ReplayPool("cpu")
    loan = ScratchLoan(pool)
    loan.open()
    assert not loan.lending
    with loan.borrowing():
        events.append("body")
    loan.close()
    graphs = _captured(pool)
    loan.open()
    assert loan.lending
    for _ in range(2):
        with loan.borrowing():
            events.append("body")
    loan.close()
    assert not loan.lending
    with loan.borrowing():
        events.append("body")
    assert events == ["body", "route", "body", "unroute", "route", "body", "unroute", "body"]
    assert loan.borrowed == 2
    assert graphs.static_outputs


def test_scratch_loan_raises_at_close_when_a_block_outlives_the_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before, after = frozenset({(0, 512)}), frozenset({(0, 512), (512, 2048)})
    readings = iter([before, after, after])  # open, close, and close after collecting cycles
    monkeypatch.setattr(ReplayPool, "live_blocks", lambda self: next(readings))
    pool = ReplayPool("cpu")
    graphs = _captured(pool)
    loan = ScratchLoan(pool)
    loan.open()
    with pytest.raises(
        PoolLeakError, match=r"1 block\(s\) .* between replayed steps .* \(2048 bytes\)"
    ):
        loan.close()
    assert not loan.lending  # the loan is over either way; the error stops the pass's caller
    assert graphs.static_outputs


def test_scratch_loan_reads_the_pool_afresh_at_each_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass that starts after one that failed before closing compares with the pool as it is
    when it starts: a block alive then (a new recording's) is not the pass's."""
    earlier, now = frozenset({(0, 512)}), frozenset({(0, 512), (512, 1024)})
    readings = iter([earlier, now, now])  # the failed pass's open, the next open, its close
    monkeypatch.setattr(ReplayPool, "live_blocks", lambda self: next(readings))
    pool = ReplayPool("cpu")
    graphs = _captured(pool)
    loan = ScratchLoan(pool)
    loan.open()
    loan.open()
    loan.close()
    assert next(readings, None) is None
    assert graphs.static_outputs


def test_scratch_loan_marks_the_pool_lent_while_it_lends() -> None:
    pool = ReplayPool("cpu")
    loan = ScratchLoan(pool)
    loan.open()
    assert not pool.lent  # nothing to lend before a graph holds the pool
    graphs = _captured(pool)
    loan.open()
    assert pool.lent
    loan.close()
    assert not pool.lent
    assert graphs.static_outputs


def test_scratch_loan_with_replays_between_lends_without_marking_the_pool_lent() -> None:
    pool = ReplayPool("cpu")
    graphs = _captured(pool)
    loan = ScratchLoan(pool, replays_between=True)
    loan.open()
    assert loan.lending
    assert not pool.lent  # its recorders keep replaying between the borrowing blocks
    loan.close()
    assert not loan.lending
    assert graphs.static_outputs


@pytest.mark.parametrize("replays_between", [False, True])
@pytest.mark.parametrize("captured", [False, True])
def test_scratch_loan_close_leaves_out_only_the_blocks_a_capture_made(
    captured: bool, replays_between: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    before, after = frozenset({(0, 512)}), frozenset({(0, 512), (512, 2048), (4096, 256)})
    readings = iter([before, after, after])
    monkeypatch.setattr(ReplayPool, "live_blocks", lambda self: next(readings))
    pool = ReplayPool("cpu")
    graphs = _captured(pool)
    loan = ScratchLoan(pool, replays_between=replays_between)
    loan.open()
    if captured:  # a graph captured mid-pass (a new signature's): its block is the pool's
        pool.captured_blocks.add((512, 2048))
    leaked = r"1 block\(s\) .* \(256 bytes\)" if captured else r"2 block\(s\) .* \(2304 bytes\)"
    with pytest.raises(PoolLeakError, match=leaked):
        loan.close()
    assert graphs.static_outputs


@pytest.mark.parametrize("replays_between", [False, True])
def test_scratch_loan_close_does_not_leave_out_a_block_an_older_capture_had(
    replays_between: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture's block from before the loan, freed since and now a borrower's leak at the
    same address and size, is the borrower's."""
    pool = ReplayPool("cpu")
    graphs = _captured(pool)  # held: a loan lends only while a graph holds the pool
    pool.captured_blocks.add((512, 2048))
    before, after = frozenset({(0, 512)}), frozenset({(0, 512), (512, 2048)})
    readings = iter([before, after, after])
    monkeypatch.setattr(ReplayPool, "live_blocks", lambda self: next(readings))
    loan = ScratchLoan(pool, replays_between=replays_between)
    loan.open()
    with pytest.raises(PoolLeakError, match=r"1 block\(s\) .* \(2048 bytes\)"):
        loan.close()
    assert graphs.static_outputs


def test_pool_notes_the_blocks_a_capture_leaves_alive_and_none_of_a_failed_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readings = iter([frozenset({(0, 512)}), frozenset({(512, 1024), (0, 512)}), frozenset()])
    monkeypatch.setattr(ReplayPool, "live_blocks", lambda self: next(readings))
    pool = ReplayPool("cpu")
    with pool.capturing():
        pass
    assert pool.captured_blocks == {(512, 1024)}
    with pytest.raises(RuntimeError, match="broken"), pool.capturing():
        raise RuntimeError("broken capture")
    assert pool.captured_blocks == {(512, 1024)}


def test_scratch_loan_stops_lending_once_no_graph_holds_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a pass that forgets the pool's only recording (its network moved) must not route into a
    # pool nothing holds: the allocator would assert
    events, _pool, graphs, loan = _open_replays_between_loan(monkeypatch)
    with loan.borrowing():
        events.append("body")
    del graphs
    gc.collect()
    with loan.borrowing():
        events.append("body")
    loan.close()
    assert events == ["route", "body", "unroute", "body"]
    assert loan.borrowed == 1


def test_pool_forgets_the_captured_blocks_a_later_capture_frees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a backward that frees the forward's activations hands their blocks back to the pool
    forward = frozenset({(0, 512), (512, 1024)})
    readings = iter([frozenset(), forward, forward, frozenset({(0, 512), (2048, 64)})])
    monkeypatch.setattr(ReplayPool, "live_blocks", lambda self: next(readings))
    pool = ReplayPool("cpu")
    with pool.capturing():
        pass
    with pool.capturing():
        pass
    assert pool.captured_blocks == {(0, 512), (2048, 64)}


def test_scratch_loan_does_not_route_while_an_exclusive_forward_is_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a loan that lets graphs replay between its blocks was open before the forward opened
    events, pool, graphs, loan = _open_replays_between_loan(monkeypatch)
    token = OpenForward(1, 0, exclusive=True)
    pool.push(token)
    with loan.borrowing():
        events.append("while open")
    token.closed = True
    with loan.borrowing():
        events.append("after")
    loan.close()
    assert events == ["while open", "route", "after", "unroute"]
    del graphs
