"""A memory pool and side stream shared by a family of recorders.

Graphs hold their memory for good, so recorders of one training step (network region, update,
EMA) share one private pool; and warm-up and capture run on a side stream so the capture sees no
work from the default stream (docs/replay-invariants.md, invariants 18-19). A recording made
while the pool already holds graphs warms up inside the pool, where its blocks are the earlier
graphs' free scratch and the capture that follows reuses them (invariant 25).
On a machine without CUDA the pool is a stand-in that only names its device.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from lucid_yolo.replay.exceptions import PoolLeakError
from lucid_yolo.replay.leak_evidence import caller_frames, drain_autograd_worker


class OpenForward:
    """A replayed forward whose backward graph has not run yet (held by the autograd node).

    Attributes:
        index: capture order of the recording it replayed.
        node_id: ``id`` of the autograd node, to find it in a later input's history.
        exclusive: its recording's backward frees the forward's activations
            (``RegionRecorder(frees_activations=True)``), so until that backward runs, the
            activations sit in blocks the pool counts as free (:meth:`ReplayPool.exclusive_open`).
    """

    def __init__(self, index: int, node_id: int, *, exclusive: bool = False) -> None:
        self.index = index
        self.node_id = node_id
        self.exclusive = exclusive
        self.closed = False


class ReplayPool:
    """One graph memory pool and one side stream for the recorders that share it.

    Memory that one graph only needs while it runs (its scratch) is handed to graphs captured
    later. So a graph may replay while another recording's activations are still waiting for
    their backward only if it was captured *after* that recording: the pool keeps the stack of
    open forwards and allows a new forward only above the newest one (see
    :meth:`may_open`), and backwards unwind in the reverse order because the new forward takes
    the open one's outputs as inputs.

    Args:
        device: the CUDA device the graphs run on; ``None`` picks the current CUDA device, or
            the CPU stand-in when CUDA is not available.
    """

    def __init__(self, device: torch.device | str | None = None) -> None:
        if device is None:
            device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        self.device = torch.device(device)
        self.uses_cuda = self.device.type == "cuda"
        self._handle: Any = None
        self._stream: torch.cuda.Stream | None = None
        self._captures = 0
        self._open: list[weakref.ref[OpenForward]] = []
        self._holders: weakref.WeakSet[object] = weakref.WeakSet()
        self._static_outputs: weakref.WeakSet[Tensor] = weakref.WeakSet()
        self.lent = False
        """Whether a :class:`ScratchLoan` lends the pool's free blocks now: its recorders then
        run native, since a replay or a recording would write blocks the borrower may hold."""
        self.captured_blocks: set[tuple[int, int]] = set()
        """The blocks each capture in this pool left alive (:meth:`capturing`): the pool's own,
        which a loan open meanwhile must not take for a borrower's."""

    def next_index(self) -> int:
        """Capture order for a new recording."""
        self._captures += 1
        return self._captures

    def open_forwards(self) -> list[OpenForward]:
        """Open forwards, oldest first (closed or garbage-collected ones are dropped)."""
        alive = [ref() for ref in self._open]
        kept = [token for token in alive if token is not None and not token.closed]
        self._open = [weakref.ref(token) for token in kept]
        return kept

    def busy(self) -> str | None:
        """Why no recorder of the pool may replay or record now, as the reason its calls run
        native under (``pool-lent``: a :class:`ScratchLoan` lends the free blocks;
        ``exclusive-open``: :meth:`exclusive_open`), or ``None``."""
        if self.lent:
            return "pool-lent"
        if self.exclusive_open():
            return "exclusive-open"
        return None

    def exclusive_open(self) -> bool:
        """Whether an open forward's activations sit in blocks the pool counts as free
        (:attr:`OpenForward.exclusive`): until its backward has run, no other graph of the pool
        may replay or record and no warm-up or loan may borrow the pool's free blocks, since
        each would write those activations."""
        return any(token.exclusive for token in self.open_forwards())

    def push(self, token: OpenForward) -> None:
        """Register a replayed forward that awaits its backward."""
        self._open.append(weakref.ref(token))

    def hold(self, holder: object) -> None:
        """Register ``holder`` as owning graphs captured in this pool, for as long as it lives.

        Each captured graph keeps a reference on the allocator's private pool until it is
        destroyed; a live holder therefore means the pool exists and stays alive while a warm-up
        borrows it (:meth:`warm_up`).
        """
        self._holders.add(holder)

    def register_static_outputs(self, outputs: Sequence[Tensor]) -> None:
        """Note a recording's static outputs: buffers at fixed addresses that only that
        recording's forward graph writes (:meth:`static_output_of`)."""
        self._static_outputs.update(outputs)

    def static_output_of(self, tensor: Tensor) -> Tensor | None:
        """The registered static output that ``tensor`` is exactly (same address, shape,
        strides, dtype and device), or ``None``.

        A region fed by an earlier region of the pool (the loss by the network) can read that
        buffer in place instead of copying it into a static input of its own.
        """
        for static in self._static_outputs:
            if (
                static.data_ptr() == tensor.data_ptr()
                and static.shape == tensor.shape
                and static.stride() == tensor.stride()
                and static.dtype == tensor.dtype
                and static.device == tensor.device
            ):
                return static
        return None

    @property
    def holds_graphs(self) -> bool:
        """Whether a graph captured in this pool is alive (see :meth:`hold`)."""
        return len(self._holders) > 0

    @property
    def handle(self) -> Any:
        """The ``torch.cuda.graph_pool_handle()`` shared by every graph of this pool."""
        if self._handle is None:
            self._handle = torch.cuda.graph_pool_handle()
        return self._handle

    @property
    def stream(self) -> torch.cuda.Stream:
        """The side stream used for warm-up and capture."""
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]
        return self._stream

    @contextlib.contextmanager
    def side_stream(self) -> Iterator[None]:
        """Run the body on the side stream, ordered after and before the current stream."""
        if not self.uses_cuda:
            yield
            return
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        try:
            with torch.cuda.stream(self.stream):
                yield
        finally:
            # also after an error: what the body queued must finish before the caller's stream
            # reuses or frees the blocks it wrote
            current.wait_stream(self.stream)

    @contextlib.contextmanager
    def warm_up(self, *, into_pool: bool) -> Iterator[None]:
        """Allocate what the side stream allocates in the body from the graph pool.

        The pool's free blocks are the scratch of the graphs already captured in it (on the
        side stream). A later region's warm-up, for example the loss's while the network's
        backward graph still waits, reserves its own blocks beside the pool otherwise, about one
        pass of its activations on top of everything the graphs hold; inside the pool it reuses
        that scratch, and the capture that follows reuses the warm-up's blocks. Borrowing the
        scratch is safe only because no graph replays during the body and nothing the body
        allocates outlives it: the pool's live blocks are compared before and after.

        Routing applies only when ``into_pool`` and a graph keeps the pool alive
        (:attr:`holds_graphs`): the allocator asserts when a caller shares a private pool that
        nothing holds; and never while an exclusive forward is open (:meth:`exclusive_open`),
        whose activations are among the free blocks. Otherwise the body runs unchanged, as it
        does on the CPU stand-in. The side stream is routed on every thread, so the backward's
        allocations on autograd's device thread go to the pool too.

        Raises:
            PoolLeakError: when a block allocated in the body is still alive after it.
        """
        if not (into_pool and self.holds_graphs) or self.exclusive_open():
            yield
            return
        before = self.live_blocks()
        with self.side_stream_allocates_in_pool():
            yield
        self._raise_if_left(
            before,
            during="a warm-up",
            why="the region keeps a device tensor beyond its call (a cache, a buffer created on "
            "first use)",
            remedy="Create it in a native call before the recording (warmup_steps >= 1 with the "
            "same inputs) or give the recorder a pool of its own",
        )

    def _raise_if_left(
        self, before: frozenset[tuple[int, int]], *, during: str, why: str, remedy: str
    ) -> None:
        """Raise when a block allocated in the pool since ``before`` (:meth:`live_blocks`) is
        still alive: the pool's graphs would overwrite it when they replay.

        torch keeps a cuBLAS workspace per handle and stream for good (torch 2.11), so one the
        borrower created is alive in the pool: it is dropped first (the next user, a capture
        among them, makes its own). A reference cycle may hold a tensor that is otherwise gone,
        and autograd's worker thread may still hold the gradients of a backward that has
        returned (:func:`drain_autograd_worker`), so a leak is counted again after
        a collection and after the worker has let go.

        Raises:
            PoolLeakError: naming ``during``, ``why`` and ``remedy``.
        """
        if self.uses_cuda:
            drop_cublas_workspaces()
        left = self.live_blocks() - before
        if left:
            gc.collect()
            # a drain that fails clears no false alarm; the count below still decides
            with contextlib.suppress(RuntimeError):
                drain_autograd_worker(self.device)
            left = self.live_blocks() - before
        if left:
            raise PoolLeakError(
                f"{len(left)} block(s) allocated during {during} in the graph pool are still "
                f"alive ({sum(size for _, size in left)} bytes): {why}. The earlier graphs of "
                f"the pool write that memory when they replay. {remedy}. "
                f"{self._allocation_sites(left)}"
            )

    def _allocation_sites(self, blocks: frozenset[tuple[int, int]]) -> str:
        """Where ``blocks`` were allocated, as far as the allocator recorded it: each block's
        frames outside torch and the installed libraries while
        ``torch.cuda.memory._record_memory_history`` is on, otherwise how to turn it on.

        Never raises: it only adds to a :class:`PoolLeakError` that must reach the caller.
        """
        sites = []
        try:
            for segment in _pool_segments(self._handle) if self.uses_cuda else []:
                address = int(segment["address"])
                for block in segment["blocks"]:
                    if (address, int(block["size"])) in blocks and "frames" in block:
                        sites.append(caller_frames(block["frames"]))
                    address += int(block["size"])
        except (KeyError, TypeError, ValueError, RuntimeError):
            sites = []
        if sites:
            return "Allocated at: " + "; ".join(sites)
        return (
            "To see where, run again after torch.cuda.memory._record_memory_history("
            "enabled='state', stacks='python')"
        )

    @contextlib.contextmanager
    def side_stream_allocates_in_pool(self) -> Iterator[None]:
        """Route every allocation made on the side stream, on any thread, to the graph pool
        (no-op on the CPU stand-in); :meth:`warm_up` says when that is safe."""
        if not self.uses_cuda:
            yield
            return
        device = self.device.index
        if device is None:
            device = torch.cuda.current_device()
        with torch.cuda.stream(self.stream):
            torch._C._cuda_beginAllocateCurrentStreamToPool(device, self.handle)
        try:
            yield
        finally:
            _end_allocate_to_pool(device, self.handle)
            torch._C._cuda_releasePool(device, self.handle)

    def live_blocks(self) -> frozenset[tuple[int, int]]:
        """``(address, size)`` of every allocated block of this pool (empty for the stand-in).

        Read from the allocator's memory snapshot, so call it around a recording or an
        evaluation pass, never per step.
        """
        if not self.uses_cuda or self._handle is None:
            return frozenset()
        live = set()
        for segment in _pool_segments(self._handle):
            address = int(segment["address"])
            for block in segment["blocks"]:
                if block["state"] == "active_allocated":
                    live.add((address, int(block["size"])))
                address += int(block["size"])
        return frozenset(live)

    @contextlib.contextmanager
    def capturing(self) -> Iterator[None]:
        """Note the blocks a capture in the body leaves alive (:attr:`captured_blocks`; none
        when it fails) and forget those it freed; a snapshot on either side, so only around a
        capture, never per step."""
        before = self.live_blocks()
        yield
        after = self.live_blocks()
        # a capture may also free blocks an earlier one left alive (a backward that frees the
        # forward's activations): those are the pool's free blocks again
        self.captured_blocks = (self.captured_blocks - (before - after)) | (after - before)

    def release_cached_blocks(self) -> None:
        """Hand the allocator's unused cached blocks back to the device (no-op without CUDA).

        The caching allocator reuses a freed block only on the stream that allocated it. What a
        warm-up frees on the side stream is therefore never reused by the default stream, nor by
        the graph pool, and what the native steps before a recording left cached on the default
        stream is never reused by the warm-up: without a release, a recording reserves the step's
        activations up to three times (default stream, side stream, pool) for the rest of the run.
        Blocks in use and the graph pools' blocks are untouched.
        """
        if self.uses_cuda:
            torch.cuda.empty_cache()

    def pool_bytes(self) -> int:
        """Bytes of the CUDA segments that belong to this pool (0 for the CPU stand-in).

        Read from the allocator's memory snapshot, so only call it after a capture, not per step.
        """
        if not self.uses_cuda or self._handle is None:
            return 0
        return sum(int(s["total_size"]) for s in _pool_segments(self._handle))


class ScratchLoan:
    """The pool's free blocks lent to eager work between replayed steps, such as an evaluation
    pass, and checked when they come back.

    Between two replayed steps the pool's free blocks, those a step needs only while it runs
    (the backward's and the loss's transients; the activations saved for the backward stay
    allocated), hold nothing. Eager work that reserved memory of its own beside them would raise
    the process's peak further above a native run's, whose evaluation reuses the blocks the
    training step freed; run inside :meth:`borrowing`, it allocates from those free blocks first
    (and grows the pool when they are too few). That is safe only while nothing the borrower
    allocated is alive when a graph of the pool replays, because the replay writes that memory:
    by default no graph replays while the loan is open (below for ``replays_between``), and
    :meth:`open` notes the pool's live blocks and :meth:`close` raises if any allocated since is
    still alive.

    Each call inside :meth:`borrowing` runs on the pool's side stream, ordered after and before
    the caller's stream, which is where the pool's free blocks are (the caching allocator hands
    a block only to the stream that allocated it). What the call returns may be read on the
    caller's stream: every later use of the side stream is ordered after the caller's work.
    Lending applies only while graphs hold the pool (:attr:`ReplayPool.holds_graphs`);
    otherwise, and on the CPU stand-in, the body runs as it is.

    With ``replays_between`` the pool's graphs keep replaying while the loan is open, between
    borrowing blocks (a replayed evaluation forward, then the metric's eager work on its
    outputs, batch after batch): each block must then free everything it allocated before it
    ends, because the next replay writes those blocks. :meth:`borrowing` checks that at once:
    the allocator's count of allocated bytes on either side, and the pool's blocks when the
    count has grown (a block that also freed older memory can hide a leak of at most that size
    from the count, and so can a cycle collection during the block that frees older memory);
    :meth:`close` checks the blocks themselves, as without the option. Both leave out the
    blocks a capture in the pool made since the loan opened
    (:attr:`ReplayPool.captured_blocks`: a new signature's recording).

    Args:
        pool: the pool whose free blocks are lent.
        replays_between: the pool's graphs may replay and record between borrowing blocks.

    Attributes:
        borrowed: calls that ran in the pool's blocks, over every pass (a test's evidence that
            the loan was taken).
    """

    def __init__(self, pool: ReplayPool, *, replays_between: bool = False) -> None:
        self.pool = pool
        self.replays_between = replays_between
        self.borrowed = 0
        self._before: frozenset[tuple[int, int]] | None = None
        self._captured_before: frozenset[tuple[int, int]] = frozenset()

    @property
    def lending(self) -> bool:
        """Whether the loan is open and the pool's blocks are lent."""
        return self._before is not None

    def open(self) -> None:
        """Start lending when graphs hold the pool and no exclusive forward is open
        (:meth:`ReplayPool.exclusive_open`; otherwise the loan stays closed); until
        :meth:`close`, the pool's recorders run native (:attr:`ReplayPool.lent`), unless the
        loan was made with ``replays_between``.

        Each pass opens afresh: what is alive in the pool when it starts is not its own, even
        after a pass that failed before :meth:`close`.
        """
        lends = self.pool.holds_graphs and not self.pool.exclusive_open()
        self._before = self.pool.live_blocks() if lends else None
        self._captured_before = frozenset(self.pool.captured_blocks)
        self.pool.lent = self._before is not None and not self.replays_between

    @contextlib.contextmanager
    def borrowing(self) -> Iterator[None]:
        """Run the body on the side stream with its allocations served from the pool.

        With ``replays_between`` the allocator's count of allocated bytes is read on either
        side, which costs nothing; only when the body left more than it found are the pool's
        blocks compared with the loan's start (a memory snapshot, after a cycle collection): a
        count taken again after that collection would let its freeing of older garbage hide the
        leak. An automatic collection inside the body that frees older memory can still keep
        the count from growing; :meth:`close` then sees the block.

        Raises:
            PoolLeakError: with ``replays_between``, when a block allocated in the pool since
                the loan opened (by this body, or an earlier one the count missed) is still
                alive at the body's end.
        """
        before = self._before
        if before is None or not self.pool.holds_graphs or self.pool.exclusive_open():
            # routing into a pool that no graph holds would trip the allocator, and an open
            # exclusive forward's activations are among the free blocks
            yield
            return
        checked = self.replays_between and self.pool.uses_cuda
        allocated = self._allocated() if checked else 0
        with self.pool.side_stream_allocates_in_pool(), self.pool.side_stream():
            yield
        self.borrowed += 1
        if checked and self._allocated() > allocated:
            self.pool._raise_if_left(
                self._accounted(before),
                during="a borrowing block",
                why="a tensor computed there is still referenced at the block's end (kept in a "
                "cache or a list, or returned to the caller)",
                remedy="Copy what must be kept (`.clone()` after the block), or create caches "
                "before it",
            )

    def _accounted(self, before: frozenset[tuple[int, int]]) -> frozenset[tuple[int, int]]:
        """The pool's blocks no borrower made: alive at the loan's open, or left by a capture
        since (an older capture's block, freed since, may now hold a borrower's leak)."""
        return before | (frozenset(self.pool.captured_blocks) - self._captured_before)

    def _allocated(self) -> int:
        """Bytes allocated on the device, every cuBLAS workspace dropped first: torch keeps one
        per handle and stream, and one made or dropped inside a block is not the block's."""
        drop_cublas_workspaces()
        # the nested counters: ``memory_allocated`` flattens and sorts every statistic first
        stats = torch.cuda.memory_stats_as_nested_dict(self.pool.device)
        return int(stats["allocated_bytes"]["all"]["current"])

    def close(self) -> None:
        """End the loan (a no-op when it is not open).

        Raises:
            PoolLeakError: when a block allocated during the loan is still alive.
        """
        before, self._before = self._before, None
        self.pool.lent = False
        if before is not None:
            self.pool._raise_if_left(
                self._accounted(before),
                during="work lent the pool's free blocks between replayed steps",
                why="a tensor computed there is still referenced (kept in a cache or a list, "
                "or returned to a caller that kept it)",
                remedy="Copy what must be kept (`.clone()` after the borrowed call), or run that "
                "work without the loan",
            )


def drop_cublas_workspaces() -> None:
    """Free the cuBLAS workspaces torch keeps per handle and stream (32 MiB each with
    ``CUBLAS_WORKSPACE_CONFIG=:4096:8``): the next matrix product on a stream makes its own
    again. Where torch's map is per thread, only this thread's go."""
    torch._C._cuda_clearCublasWorkspaces()


def _pool_segments(handle: Any) -> list[dict[str, Any]]:
    """The allocator's segments that belong to the private pool ``handle``."""
    snapshot: Callable[[], list[dict[str, Any]]] = torch.cuda.memory_snapshot
    return [s for s in snapshot() if tuple(s.get("segment_pool_id", ())) == tuple(handle)]


def _end_allocate_to_pool(device: int, handle: Any) -> None:
    """Stop routing to the pool: ``_cuda_endAllocateToPool`` in recent torch, before it
    ``_cuda_endAllocateCurrentStreamToPool`` (same arguments, same allocator call)."""
    name = "_cuda_endAllocateToPool"
    if not hasattr(torch._C, name):
        name = "_cuda_endAllocateCurrentStreamToPool"
    getattr(torch._C, name)(device, handle)


__all__ = ["ReplayPool", "ScratchLoan"]
