"""Capture safety: naming the op that broke a capture, and autocast's cast cache inside a region.

CUDA reports most illegal work during capture as a generic "operation failed due to a previous
error during capture" (docs/replay-invariants.md, invariant 17). :class:`OpTrail` watches the
dispatcher while capturing so the recorder can say which operator it was and what to do about it.
On a machine without CUDA the same trail rejects the operators that would break a real capture,
so the CPU suite exercises the failure path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lucid_yolo.replay.exceptions import CaptureError

_HOST_SYNC_OPS: dict[str, str] = {
    "aten._local_scalar_dense": "a host sync (.item(), bool(), int() or float() of a tensor)",
    "aten.nonzero": "nonzero (also behind boolean-mask indexing and torch.where(cond))",
    "aten.masked_select": "masked_select (boolean-mask indexing)",
    "aten.unique": "unique (data-dependent output size)",
    "aten._unique2": "unique (data-dependent output size)",
    "aten.unique_consecutive": "unique_consecutive (data-dependent output size)",
    "aten.repeat_interleave": "repeat_interleave with tensor repeats (data-dependent size)",
}


def _op_name(func: object) -> str:
    name = str(getattr(func, "_schema", func)).split("(")[0]
    return "aten." + name.removeprefix("aten::").split(".")[0]


class OpTrail(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch stub gap
    """Remembers the last operator dispatched; optionally rejects capture-unsafe operators.

    Args:
        reject_unsafe: raise :class:`CaptureError` on an operator that needs a host sync
            (used by the CPU stand-in, where nothing else would fail).
    """

    def __init__(self, reject_unsafe: bool = False) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.reject_unsafe = reject_unsafe
        self.last: str | None = None

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: Any = (),
        kwargs: Any = None,
    ) -> Any:
        self.last = _op_name(func)
        if self.last in _BOOL_INDEX_OPS and _has_mask_index(args):
            self.last = "aten.nonzero"
        if self.reject_unsafe and self.last in _HOST_SYNC_OPS:
            error = RuntimeError("not allowed while a CUDA graph is capturing")
            raise CaptureError(describe_failure(error, self.last), self.last)
        return func(*args, **(kwargs or {}))


_BOOL_INDEX_OPS = frozenset({"aten.index", "aten.index_put", "aten.index_put_"})


def _has_mask_index(args: Any) -> bool:
    indices = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else ()
    return any(
        isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices
    )


def describe_failure(error: BaseException, op: str | None) -> str:
    """A retire detail for a capture failure: the error, the operator and the fix."""
    if isinstance(error, torch.cuda.OutOfMemoryError):
        return "out of memory while recording; lower the batch or max_signatures"
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if op in _HOST_SYNC_OPS:
        return (
            f"{op} is {_HOST_SYNC_OPS[op]} inside the region ({first_line}); move it out of the "
            "region or replace it with a static-shape, sync-free formulation"
        )
    where = f" at {op}" if op else ""
    return f"{type(error).__name__}{where}: {first_line}"


def capture_with_trail(fn: Callable[[], Any], reject_unsafe: bool) -> Any:
    """Run ``fn`` under an :class:`OpTrail`; re-raise any failure as :class:`CaptureError`."""
    trail = OpTrail(reject_unsafe)
    try:
        with trail:
            return fn()
    except CaptureError:
        raise
    except Exception as error:
        raise CaptureError(describe_failure(error, trail.last), trail.last) from error


@contextlib.contextmanager
def autocast_cache_emulation(device_type: str) -> Iterator[None]:
    """Reproduce eager autocast's weight-cast cache inside a recorded region.

    Capture needs the cache empty at the boundaries (a cast cached outside would be read from
    stale memory), but eager caches casts of fp32 leaves, which changes how the gradients of a
    weight used several times are summed. Clearing the cache, running and clearing again records
    the casts inside the graph and matches eager-with-cache bitwise (docs/replay-invariants.md,
    invariant 6). No-op when autocast is off for ``device_type``, and when the caller runs
    autocast with ``cache_enabled=False``: eager then casts a weight at every use and sums its
    gradients in fp32, which forcing the cache on would change to a low-precision sum.
    """
    if not (torch.is_autocast_enabled(device_type) and torch.is_autocast_cache_enabled()):
        yield
        return
    torch.clear_autocast_cache()
    try:
        yield
    finally:
        torch.clear_autocast_cache()


@contextlib.contextmanager
def backward_without_autocast(device_type: str) -> Iterator[None]:
    """Run a recording's backward passes with autocast off, as a native backward runs.

    Autograd runs a backward under the autocast state of the code that starts it, and the
    recorder starts its warm-up and captured backwards inside the region's call, that is
    inside the caller's autocast region. A native step calls ``backward()`` after leaving it
    (Lightning, the AMP recipe), so there the backward of a float32 matrix product the region
    computed with autocast off (the segment loss's mask assembly) stays float32; under autocast
    its ``bmm``/``mm`` would run in bf16/fp16 and the gradients differ
    (docs/engineering/replay-complete.md, *the cause*). A backward started under autocast is
    reported at replay instead (``backward-autocast``).
    """
    with torch.autocast(device_type, enabled=False):
        yield


__all__ = [
    "OpTrail",
    "autocast_cache_emulation",
    "backward_without_autocast",
    "capture_with_trail",
    "describe_failure",
]
