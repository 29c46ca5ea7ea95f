"""Who held the CUDA memory at a fit's peak: the caching allocator's trace, replayed on the host.

``torch.cuda.memory._record_memory_history(stacks="python")`` logs every block allocation and
free, and every segment the allocator reserves or returns, each with the Python stack that caused
it. Replaying that log finds the moment of the peak (allocated or reserved bytes, optionally only
outside the graph pools and within a range of events) and lists the blocks alive then, grouped by
owner (a graph pool, or the stream outside the pools) and by allocation site: the innermost frame
in the project's code, and the innermost frame of the replay library that led there (the
recorder's warm-up, a capture, a replayed backward), so one table says which code path held the
bytes. ``tools/bench_replay_memory.py --history`` runs it in each fit's process.

The trace format (``torch.cuda.memory._snapshot()["device_traces"][device]``): a list of dicts
with ``action`` (``alloc``, ``free_requested``, ``free_completed``, ``segment_alloc``,
``segment_free``, ``segment_map``, ``segment_unmap``, ...), ``addr``, ``size``, ``stream`` and
``frames`` (innermost first, each ``filename``, ``line``, ``name``).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

Event = dict[str, Any]
PoolRange = tuple[int, int, str]
"""A graph pool's segment: start address, size, owner name (``"pool (a, b)"``)."""

_TOOLS_PART = "/tools/"
_PROJECT_PARTS = ("/lucid_yolo/", _TOOLS_PART)
_REPLAY_PART = "/lucid_yolo/replay/"
_RESERVE = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


def pool_ranges(segments: Sequence[dict[str, Any]]) -> list[PoolRange]:
    """The address ranges of graph-pool segments in a ``torch.cuda.memory_snapshot()``.

    A pool's segments live as long as its graphs, so the snapshot at the end of a fit names
    every pool segment the trace ever saw (a segment freed earlier is not a pool's).
    """
    ranges = []
    for segment in segments:
        pool = tuple(segment.get("segment_pool_id", (0, 0)))
        if pool != (0, 0):
            ranges.append((int(segment["address"]), int(segment["total_size"]), f"pool {pool}"))
    return sorted(ranges)


def owner_of(event: Event, pools: Sequence[PoolRange]) -> str:
    """``"pool (a, b)"`` for an address inside a graph pool, else ``"stream <id>"``.

    ``pools`` must be sorted by start address (:func:`pool_ranges` sorts them).
    """
    address = int(event["addr"])
    position = bisect.bisect_right(pools, (address, float("inf"), "")) - 1
    if position >= 0:
        start, size, name = pools[position]
        if address < start + size:
            return name
    return f"stream {event.get('stream', 0)}"


def _pool_reservations(trace: Sequence[Event], pools: Sequence[PoolRange]) -> dict[int, str]:
    """The reserving events (by index) whose memory is a graph pool's.

    A pool's segments live as long as its graphs, so a pool reservation is one that lies within
    a segment the end-of-fit snapshot lists as the pool's and that the trace never frees
    afterwards. With PyTorch's default segments that is one ``segment_alloc`` of the segment's
    whole size; with expandable segments the snapshot's segment is the range the allocator
    reserved, and the trace maps memory into it piece by piece (``segment_map``).
    """
    open_reservations: dict[int, int] = {}
    for index, event in enumerate(trace):
        sign = _RESERVE.get(event["action"], 0)
        if sign > 0:
            open_reservations[int(event["addr"])] = index
        elif sign < 0:
            open_reservations.pop(int(event["addr"]), None)
    found = {}
    for address, index in open_reservations.items():
        position = bisect.bisect_right(pools, (address, float("inf"), "")) - 1
        if position < 0:
            continue
        start, size, name = pools[position]
        if address + int(trace[index]["size"]) <= start + size:
            found[index] = name
    return found


def event_owners(trace: Sequence[Event], pools: Sequence[PoolRange]) -> list[str]:
    """Per event, who owned the memory it names at that moment (``""`` for other actions).

    A segment is a graph pool's (:func:`_pool_reservations`) or the stream's it was reserved
    for; a block is its segment's owner when allocated, and a free its block's. The end-of-fit
    pool ranges alone would misname earlier blocks: once a segment is freed, a later pool
    segment may be reserved at the same address. A block in a segment reserved before the trace
    began falls back to :func:`owner_of`.
    """
    pool_reservations = _pool_reservations(trace, pools)
    owners = [""] * len(trace)
    starts: list[int] = []
    segments: dict[int, tuple[int, str]] = {}
    blocks: dict[int, str] = {}
    for index, event in enumerate(trace):
        action, sign = event["action"], _RESERVE.get(event["action"], 0)
        if sign > 0:
            address = int(event["addr"])
            name = pool_reservations.get(index, f"stream {event.get('stream', 0)}")
            if address not in segments:
                bisect.insort(starts, address)
            segments[address] = (int(event["size"]), name)
            owners[index] = name
        elif sign < 0:
            address = int(event["addr"])
            if address in segments:
                owners[index] = segments.pop(address)[1]
                starts.remove(address)
        elif action == "alloc":
            address = int(event["addr"])
            position = bisect.bisect_right(starts, address) - 1
            start = starts[position] if position >= 0 else -1
            inside = position >= 0 and address < start + segments[start][0]
            owners[index] = segments[start][1] if inside else owner_of(event, pools)
            blocks[address] = owners[index]
        elif action == "free_completed":
            owners[index] = blocks.pop(int(event["addr"]), "") or owner_of(event, pools)
    return owners


def _short(frame: dict[str, Any]) -> str:
    filename = str(frame.get("filename", "?"))
    for marker in ("/lucid_yolo/", "/site-packages/", "/tools/"):
        if marker in filename:
            filename = filename.rsplit(marker, 1)[1]
            break
    return f"{filename}:{frame.get('line', 0)} {frame.get('name', '?')}"


def site_of(frames: Sequence[dict[str, Any]]) -> str:
    """Where a block was allocated: the innermost project frame (else the innermost frame),
    followed by ``" < "`` and the innermost replay-library frame when that is another one.

    When the innermost project frame is a tool's (a block Lightning or torch allocated inside
    ``trainer.fit``), the innermost frame of another library (Lightning, torchmetrics; not torch)
    comes first, so ``_fit``'s blocks read apart by the code that allocated them.

    A dispatch mode's ``__torch_dispatch__`` (the recorder's capture trail runs every captured
    op through one) is skipped: it would name itself for every block of a capture.
    """
    frames = [f for f in frames if f.get("name") != "__torch_dispatch__"]
    if not frames:
        return "?"
    project = [f for f in frames if any(p in str(f.get("filename", "")) for p in _PROJECT_PARTS)]
    inner = project[0] if project else frames[0]
    if _TOOLS_PART in str(inner.get("filename", "")):
        library = next((f for f in frames[: frames.index(inner)] if _is_library(f)), None)
        if library is not None:
            return f"{_short(library)} < {_short(inner)}"
    replay = next((f for f in frames if _REPLAY_PART in str(f.get("filename", ""))), None)
    if replay is None or replay is inner:
        return _short(inner)
    return f"{_short(inner)} < {_short(replay)}"


def _is_library(frame: dict[str, Any]) -> bool:
    filename = str(frame.get("filename", ""))
    return "/site-packages/" in filename and "/site-packages/torch/" not in filename


def _step_counter(trace: Sequence[Event], is_marker: Callable[[Event], bool]) -> list[int]:
    """Per event, the 1-based step it belongs to (a marker event ends a step)."""
    steps, step = [], 1
    for event in trace:
        steps.append(step)
        if is_marker(event):
            step += 1
    return steps


def find_peak(deltas: Sequence[int], start: int = 0, stop: int | None = None) -> tuple[int, int]:
    """Index and value of the highest running sum of ``deltas`` within ``[start, stop)``.

    The sum runs from the first event, so blocks alive before ``start`` still count. Returns
    ``(-1, 0)`` for an empty range.
    """
    stop = len(deltas) if stop is None else stop
    total, best, best_index = 0, 0, -1
    for index, delta in enumerate(deltas[:stop]):
        total += delta
        if index >= start and (best_index < 0 or total > best):
            best, best_index = total, index
    return best_index, best


def live_at(trace: Sequence[Event], index: int) -> list[int]:
    """The indices of the ``alloc`` events whose blocks are still allocated after ``index``."""
    live: dict[int, int] = {}
    for position, event in enumerate(trace[: index + 1]):
        action = event["action"]
        if action == "alloc":
            live[int(event["addr"])] = position
        elif action == "free_completed":
            live.pop(int(event["addr"]), None)
    return list(live.values())


def reserved_at(trace: Sequence[Event], index: int, owners: Sequence[str]) -> dict[str, int]:
    """Reserved bytes per owner after event ``index`` (segments the trace saw reserved)."""
    segments: dict[int, int] = {}
    for position, event in enumerate(trace[: index + 1]):
        sign = _RESERVE.get(event["action"], 0)
        if sign > 0:
            segments[int(event["addr"])] = position
        elif sign < 0:
            segments.pop(int(event["addr"]), None)
    by_owner: dict[str, int] = defaultdict(int)
    for position in segments.values():
        by_owner[owners[position]] += int(trace[position]["size"])
    return dict(by_owner)


def group_sites(blocks: Sequence[tuple[Event, str]], top: int) -> list[dict[str, Any]]:
    """Bytes and block counts per (owner, site) of ``(alloc event, owner)`` pairs, largest
    first; the rest summed as ``other``."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for block, owner in blocks:
        entry = groups[(owner, site_of(block.get("frames", ())))]
        entry[0] += int(block["size"])
        entry[1] += 1
    ranked = sorted(groups.items(), key=lambda item: -item[1][0])
    rows = [
        {"owner": owner, "site": site, "bytes": size, "blocks": count}
        for (owner, site), (size, count) in ranked[:top]
    ]
    rest = ranked[top:]
    if rest:
        rows.append(
            {
                "owner": "*",
                "site": f"other ({len(rest)} sites)",
                "bytes": sum(size for _, (size, _) in rest),
                "blocks": sum(count for _, (_, count) in rest),
            }
        )
    return rows


def attribute(
    trace: Sequence[Event],
    pools: Sequence[PoolRange],
    is_marker: Callable[[Event], bool],
    top: int = 15,
) -> dict[str, Any]:
    """The fit's peaks in one report, each with the blocks alive then by owner and site.

    - ``allocated``: the peak of allocated bytes over the whole trace;
    - ``reserved``: the peak of reserved bytes, with the reserved bytes per owner then;
    - ``outside_pools_last_step``: the peak of allocated bytes outside the graph pools during
      the last complete step (what a steady replayed step needs besides its graphs).

    Args:
        trace: one device's allocator trace, oldest first.
        pools: graph-pool segment ranges (:func:`pool_ranges`).
        is_marker: whether an event marks the end of a training step.
        top: sites listed per peak before the rest is summed.
    """
    steps = _step_counter(trace, is_marker)
    owners = event_owners(trace, pools)

    def allocated(event: Event) -> int:
        action = event["action"]
        if action == "alloc":
            return int(event["size"])
        return -int(event["size"]) if action == "free_completed" else 0

    def reserved(event: Event) -> int:
        sign = _RESERVE.get(event["action"], 0)
        return sign * int(event["size"]) if sign else 0

    allocated_deltas = [allocated(event) for event in trace]
    outside_deltas = [
        0 if owner.startswith("pool") else delta
        for delta, owner in zip(allocated_deltas, owners, strict=True)
    ]
    markers = [i for i, event in enumerate(trace) if is_marker(event)]
    report: dict[str, Any] = {"events": len(trace), "steps_marked": len(markers)}
    index, value = find_peak(allocated_deltas)
    report["allocated"] = _describe(trace, steps, owners, index, value, top)
    index, value = find_peak([reserved(event) for event in trace])
    report["reserved"] = _describe(trace, steps, owners, index, value, top)
    report["reserved"]["reserved_by_owner"] = (
        reserved_at(trace, index, owners) if index >= 0 else {}
    )
    if len(markers) >= 2:
        index, value = find_peak(outside_deltas, markers[-2] + 1, markers[-1])
        report["outside_pools_last_step"] = _describe(
            trace, steps, owners, index, value, top, outside_only=True
        )
    return report


def _describe(
    trace: Sequence[Event],
    steps: Sequence[int],
    owners: Sequence[str],
    index: int,
    value: int,
    top: int,
    outside_only: bool = False,
) -> dict[str, Any]:
    """The peak at event ``index`` (``value`` bytes): its step and the blocks alive then."""
    if index < 0:
        return {"index": -1}
    blocks = [(trace[i], owners[i]) for i in live_at(trace, index)]
    if outside_only:
        blocks = [(block, owner) for block, owner in blocks if not owner.startswith("pool")]
    by_owner: dict[str, int] = defaultdict(int)
    for block, owner in blocks:
        by_owner[owner] += int(block["size"])
    return {
        "index": index,
        "step": steps[index],
        "bytes": value,
        "allocated_by_owner": dict(by_owner),
        "sites": group_sites(blocks, top),
    }


__all__ = [
    "attribute",
    "event_owners",
    "find_peak",
    "group_sites",
    "live_at",
    "owner_of",
    "pool_ranges",
    "reserved_at",
    "site_of",
]
