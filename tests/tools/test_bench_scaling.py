"""The scaling benchmark counts a DDP fit's images over every rank and leaves the first epoch
out of the steady rate."""

from __future__ import annotations

from types import ModuleType

import pytest
from tool_modules import load_tool


@pytest.fixture
def bench_scaling(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The tool as a module; the multicast variables it sets on import are undone afterwards."""
    for name in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        monkeypatch.setenv(name, "0" if name == "NCCL_NVLS_ENABLE" else "1")
    return load_tool("bench_scaling", monkeypatch)


def test_measures_of_a_two_rank_fit_count_every_rank_and_skip_the_first_epoch(
    bench_scaling: ModuleType,
) -> None:
    run = {
        "wall_s": 48.0,
        "startup_s": 38.0,
        "train_images": 384,  # rank 0's shard of 3 epochs of 256 images
        "world_size": 2,
        "epochs": [{"wall_s": 4.0}, {"wall_s": 2.0}, {"wall_s": 1.0}],
        "peak_reserved_gib": 0.75,
    }
    measures = bench_scaling._measures(run)
    assert measures["whole_fit_img_per_s"] == 768 / 48.0
    assert measures["steady_epoch_s"] == 1.5  # median of epochs 2 and 3
    assert measures["steady_img_per_s"] == 256 / 1.5
    assert measures["startup_s"] == 38.0
