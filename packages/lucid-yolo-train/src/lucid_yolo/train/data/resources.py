"""Loader defaults chosen for the machine: worker processes and whether to cache decoded images.

A replayed training step of a nano model takes a few tens of milliseconds, so JPEG decoding in the
loader, not the GPU, sets the pace once the step is graphed (``docs/engineering/
train-data-pipeline.md``: ``imread`` is over half a worker's time; the RAM cache makes the loader
2.7x faster). The defaults therefore follow the machine instead of fixed numbers: workers from the
CPU count, and the RAM cache on whenever the decoded split fits a share of the memory that is
available now, unless an earlier run left a disk cache of the unchanged images to reuse. Each
choice comes with a sentence saying why, which the data module prints once. Samples never depend
on either choice (each sample is seeded by its index and cached pixels are the pixels a worker
would decode), so the defaults change speed only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

CacheMode = Literal["ram", "disk", "off"]
CacheRequest = bool | Literal["disk"] | None
"""``True``/``False`` for the RAM cache on or off, ``"disk"`` for :mod:`.disk_cache`, ``None``
to decide from the split's size and the memory available."""

MAX_AUTO_WORKERS = 8
"""Beyond about 8 workers the loader stopped scaling on the 16-core H200 host (259 img/s with 8,
262 with 12, 640 px, no cache; ``docs/engineering/cli.md``), and each worker costs memory."""

AUTO_CACHE_MEMORY_SHARE = 0.5
"""Share of the currently available RAM the automatic cache of one split may take."""

MEMINFO = Path("/proc/meminfo")


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask where the OS has one), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def available_memory() -> int | None:
    """Bytes of RAM available to new allocations without swapping, or ``None`` if unknown.

    Linux's ``MemAvailable`` counts reclaimable page cache, which ``sysconf``'s free pages do not;
    elsewhere the free pages are the best cheap estimate.
    """
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


@dataclass(frozen=True)
class WorkerChoice:
    """How many loader workers to start, and why."""

    workers: int
    reason: str


@dataclass(frozen=True)
class CacheChoice:
    """Where to cache a split's decoded images, and why.

    Attributes:
        mode: ``"ram"``, ``"disk"`` or ``"off"``.
        budget: bytes the RAM cache may hold (0 otherwise).
        reason: one sentence for the user, with the numbers behind the choice.
    """

    mode: CacheMode
    budget: int
    reason: str


def choose_workers(requested: int | None, cpus: int) -> WorkerChoice:
    """Loader workers: ``requested`` capped at ``cpus``, or one per CPU up to 8 when ``None``.

    Args:
        requested: the user's number of workers, or ``None`` for the machine default.
        cpus: CPUs this process may use.
    """
    if requested is None:
        workers = min(MAX_AUTO_WORKERS, cpus)
        return WorkerChoice(
            workers, f"{workers} loader workers ({cpus} CPUs, at most 8 by default)"
        )
    workers = min(requested, cpus)
    if workers < requested:
        return WorkerChoice(workers, f"{workers} loader workers (asked {requested}, {cpus} CPUs)")
    return WorkerChoice(workers, f"{workers} loader workers (as asked)")


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/lucid-yolo`` (default ``~/.cache/lucid-yolo``): the disk cache's root."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lucid-yolo"


def size_text(num_bytes: int) -> str:
    """``num_bytes`` for a reader: GiB with two decimals from 1 GiB, below it whole MiB.

    A small split's cache read "0.00 GiB" in GiB alone (issue 18's walk).
    """
    if num_bytes >= 2**30:
        return f"{num_bytes / 2**30:.2f} GiB"
    return f"{round(num_bytes / 2**20)} MiB"


def decoded_bytes(num_images: int, imgsz: int) -> int:
    """Upper bound of the decoded size of ``num_images`` RGB images with long side ``imgsz``."""
    return num_images * imgsz * imgsz * 3


def choose_cache(
    requested: CacheRequest,
    *,
    num_images: int,
    imgsz: int,
    max_bytes: int,
    available: int | None,
    disk_cache_found: bool = False,
) -> CacheChoice:
    """How to cache a split: as asked, or when ``None`` the disk cache an earlier run wrote for
    these unchanged images (nothing to decode), else RAM if the decoded size fits the budget.

    The automatic budget is the smaller of ``max_bytes`` and half the RAM available now; with the
    available RAM unknown, only ``max_bytes`` bounds it.

    Args:
        requested: ``True``/``False``/``"disk"`` as the user asked, ``None`` to decide here.
        num_images: images in the split.
        imgsz: long side the cache resizes to.
        max_bytes: the user's cache budget per split.
        available: bytes of RAM available now (:func:`available_memory`).
        disk_cache_found: ``cache_dir`` holds a complete disk cache of the split's images as they
            are now (:func:`.disk_cache.has_disk_cache`).
    """
    need = decoded_bytes(num_images, imgsz)
    if requested == "disk":
        return CacheChoice(
            "disk", 0, "disk cache (as asked; reused while the images are unchanged)"
        )
    if requested is True:
        return CacheChoice("ram", max_bytes, "RAM cache on (as asked)")
    if requested is False:
        return CacheChoice("off", 0, "RAM cache off (as asked)")
    if disk_cache_found:
        return CacheChoice(
            "disk",
            0,
            "disk cache of an earlier run reused (written with cache=disk, the images unchanged "
            "since), nothing to decode",
        )
    budget = max_bytes
    if available is not None:
        budget = min(budget, int(available * AUTO_CACHE_MEMORY_SHARE))
    if num_images == 0 or need > budget:
        return CacheChoice(
            "off",
            0,
            f"RAM cache off: {num_images} decoded images need up to {size_text(need)}, "
            f"more than the {size_text(budget)} budget (half the available RAM, at most "
            f"cache_max_bytes); pass cache=true to cache what fits, or cache=disk",
        )
    return CacheChoice(
        "ram",
        budget,
        f"RAM cache on: {num_images} decoded images need up to {size_text(need)} of a "
        f"{size_text(budget)} budget (half the available RAM, at most cache_max_bytes)",
    )


__all__ = [
    "CacheChoice",
    "CacheMode",
    "CacheRequest",
    "WorkerChoice",
    "available_memory",
    "choose_cache",
    "choose_workers",
    "cpu_count",
    "decoded_bytes",
    "size_text",
    "user_cache_dir",
]
