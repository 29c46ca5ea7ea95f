"""A memory pool and side stream shared by a family of recorders.

Graphs hold their memory for good, so recorders of one training step (network region, update,
EMA) share one private pool; and warm-up and capture run on a side stream so the capture sees no
work from the default stream (docs/replay-invariants.md, invariants 18-19).
On a machine without CUDA the pool is a stand-in that only names its device.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch


class OpenForward:
    """A replayed forward whose backward graph has not run yet (held by the autograd node).

    Attributes:
        index: capture order of the recording it replayed.
        node_id: ``id`` of the autograd node, to find it in a later input's history.
    """

    def __init__(self, index: int, node_id: int) -> None:
        self.index = index
        self.node_id = node_id
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

    def push(self, token: OpenForward) -> None:
        """Register a replayed forward that awaits its backward."""
        self._open.append(weakref.ref(token))

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
        with torch.cuda.stream(self.stream):
            yield
        current.wait_stream(self.stream)

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
        snapshot: Callable[[], list[dict[str, Any]]] = torch.cuda.memory_snapshot
        segments = snapshot()
        return sum(
            int(s["total_size"])
            for s in segments
            if tuple(s.get("segment_pool_id", ())) == tuple(self._handle)
        )


__all__ = ["ReplayPool"]
