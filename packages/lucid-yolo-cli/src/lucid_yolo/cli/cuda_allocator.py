"""The CUDA caching allocator of a command: expandable segments, unless the user configured it.

A replayed fit keeps its training step's activations in the CUDA graphs' private pool, so
validation and the data path's device work cannot reuse them as a native fit does; they reserve
blocks of their own beside the pool. With PyTorch's default segments, blocks of one size (a
validation batch is twice a training batch) are cut from segments that blocks of another size
cannot reuse, and the reservation grows past what is ever allocated at once: at detect batch 16
on the H200 a replayed fit reserved 4.09 GiB for a 2.90 GiB allocated peak. Expandable segments
map memory as it is needed in one growing range per stream, so a freed range serves any size.
Measured on the H200 (``docs/engineering/whole-fit-speed.md``, session 12, one fit each): peak
reserved of the same CLI fits 4.09 → 3.60 GiB replayed and 3.12 → 2.83 GiB native, their times
within one run's spread (31.4 → 30.7 s, 38.6 → 39.6 s), and the gpu suite (its bitwise parity
tests among them; the faster-coco-eval parity file left out, as in session 11) passed with them.

PyTorch reads the setting when its CUDA allocator first starts, so the CLI sets the variable
before a Lightning command imports torch. A variable the user set, to any value, is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

ALLOCATOR_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")
"""The variables PyTorch reads its allocator settings from: the CUDA name, the newer name for any
device, and ROCm's."""

EXPANDABLE_SEGMENTS = "expandable_segments:True"
"""The default's value: one growing range of mapped memory per stream instead of fixed segments."""


def set_default_allocator(environ: MutableMapping[str, str]) -> None:
    """Write expandable segments into ``environ`` unless one of the allocator variables is set."""
    if not any(name in environ for name in ALLOCATOR_VARIABLES):
        environ[ALLOCATOR_VARIABLES[0]] = EXPANDABLE_SEGMENTS


def allocator_clause(device_type: str, environ: Mapping[str, str]) -> str:
    """The start line's words on the allocator of a CUDA run: every allocator variable set, by
    name (torch versions differ in which one wins when several are set); empty elsewhere."""
    settings = [f"{name}={environ[name]}" for name in ALLOCATOR_VARIABLES if name in environ]
    if device_type != "cuda" or not settings:
        return ""
    return f", CUDA allocator {' '.join(settings)}"


__all__ = [
    "ALLOCATOR_VARIABLES",
    "EXPANDABLE_SEGMENTS",
    "allocator_clause",
    "set_default_allocator",
]
