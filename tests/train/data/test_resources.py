"""Loader defaults from the machine: workers from the CPU count, the RAM cache from the budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from lucid_yolo.train.data import resources
from lucid_yolo.train.data.resources import (
    available_memory,
    choose_cache,
    choose_workers,
    decoded_bytes,
    size_text,
)

GIB = 2**30


def test_choose_workers_default_is_one_per_cpu_up_to_eight() -> None:
    assert choose_workers(None, 2).workers == 2
    assert choose_workers(None, 16).workers == 8
    assert "16 CPUs" in choose_workers(None, 16).reason


def test_choose_workers_caps_a_request_at_the_cpu_count() -> None:
    capped = choose_workers(12, 4)
    assert capped.workers == 4
    assert "asked 12" in capped.reason
    assert choose_workers(0, 4).workers == 0


def test_choose_cache_on_when_the_split_fits_half_the_available_ram() -> None:
    need = decoded_bytes(512, 640)
    choice = choose_cache(None, num_images=512, imgsz=640, max_bytes=8 * GIB, available=4 * need)
    assert choice.mode == "ram"
    assert choice.budget == 2 * need
    assert choice.reason.startswith("RAM cache on: 512 decoded images need up to 600 MiB")


@pytest.mark.parametrize(
    ("num_bytes", "text"),
    [(0, "0 MiB"), (7_077_888, "7 MiB"), (2**30 - 1, "1024 MiB"), (2**30, "1.00 GiB")],
)
def test_size_text_is_mib_below_one_gib(num_bytes: int, text: str) -> None:
    assert size_text(num_bytes) == text


def test_choose_cache_off_when_the_split_exceeds_the_budget() -> None:
    need = decoded_bytes(512, 640)
    by_ram = choose_cache(None, num_images=512, imgsz=640, max_bytes=8 * GIB, available=need)
    by_limit = choose_cache(None, num_images=512, imgsz=640, max_bytes=need - 1, available=None)
    assert by_ram.mode == by_limit.mode == "off"
    assert "pass cache=true" in by_ram.reason


def test_choose_cache_honours_the_request() -> None:
    on = choose_cache(True, num_images=10**6, imgsz=640, max_bytes=GIB, available=0)
    off = choose_cache(False, num_images=1, imgsz=64, max_bytes=GIB, available=100 * GIB)
    disk = choose_cache("disk", num_images=10**6, imgsz=640, max_bytes=GIB, available=0)
    assert (on.mode, on.budget) == ("ram", GIB)
    assert (off.mode, off.budget) == ("off", 0)
    assert disk.mode == "disk"


def test_choose_cache_off_for_an_empty_split() -> None:
    assert choose_cache(None, num_images=0, imgsz=64, max_bytes=GIB, available=GIB).mode == "off"


def test_available_memory_reads_memavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       1000 kB\nMemFree:         10 kB\nMemAvailable:    300 kB\n")
    monkeypatch.setattr(resources, "MEMINFO", meminfo)
    assert available_memory() == 300 * 1024


def test_available_memory_falls_back_without_meminfo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resources, "MEMINFO", tmp_path / "absent")
    value = available_memory()
    assert value is None or value > 0


def test_choose_cache_reuses_a_disk_cache_found_when_not_asked() -> None:
    found = choose_cache(
        None, num_images=512, imgsz=640, max_bytes=GIB, available=0, disk_cache_found=True
    )
    assert found.mode == "disk"
    assert found.reason.startswith("disk cache of an earlier run reused")


def test_choose_cache_request_wins_over_a_disk_cache_found() -> None:
    ram = choose_cache(
        True, num_images=8, imgsz=64, max_bytes=GIB, available=GIB, disk_cache_found=True
    )
    off = choose_cache(
        False, num_images=8, imgsz=64, max_bytes=GIB, available=GIB, disk_cache_found=True
    )
    assert (ram.mode, off.mode) == ("ram", "off")
