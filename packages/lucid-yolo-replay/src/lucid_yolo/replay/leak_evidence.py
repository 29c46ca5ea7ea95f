"""What a leak check in the graph pool can rule out and name before it raises.

A block counted alive right after a warm-up or a loan may be on its way out (autograd's worker
thread still holds a finished backward) or really kept; when it is kept, the allocator's history
says which line made it. :class:`~lucid_yolo.replay.pool.ReplayPool` uses both, only on the path
that is about to raise ``PoolLeakError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

LIBRARY_PATHS = ("/torch/", "site-packages", "dist-packages", "/lib/python3", "<")
"""Parts of a frame's file name that place it in torch, an installed library or CPython; a
leak's message names the frames outside them, where the caller's code made the block."""


def drain_autograd_worker(device: torch.device) -> None:
    """Return once autograd's worker thread for ``device`` has let go of every finished backward.

    A backward of CUDA tensors runs on the engine's worker thread for their device, which wakes
    the caller when the last node is done and only then, at the end of its loop iteration, drops
    its reference to the task (``thread_main`` in torch/csrc/autograd/engine.cpp). Until it
    does, the task keeps what it hands back (the gradients of ``autograd.grad``): a caller that
    counts live memory right after a backward can now and then find blocks that are about to
    be freed (2 of 500 backwards on the H200, tools/probe_autograd_release.py). The worker
    serves its queue in order, so a tiny backward on the same device returns only after that
    iteration has ended; its own two scalars are allocated on the current stream.
    """
    with torch.inference_mode(False), torch.enable_grad():
        probe = torch.zeros((), device=device, requires_grad=True)
        torch.autograd.grad(probe * 1.0, probe)


def caller_frames(frames: Sequence[dict[str, Any]]) -> str:
    """``file:line (function)`` of the first four recorded frames outside torch, the installed
    libraries and CPython; a block allocated where Python recorded none of those (a C++ thread
    such as autograd's worker) says so."""
    named = [
        f"{frame.get('filename')}:{frame.get('line')} ({frame.get('name')})"
        for frame in frames
        if not any(part in str(frame.get("filename", "<")) for part in LIBRARY_PATHS)
    ]
    return " < ".join(named[:4]) or "no Python frame outside the libraries (a C++ thread?)"


__all__ = ["LIBRARY_PATHS", "caller_frames", "drain_autograd_worker"]
