"""The scaling benchmark counts a DDP fit's images over every rank and leaves the first epoch
out of the steady rate."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"


@pytest.fixture
def bench_scaling(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The tool as a module; the multicast variables it sets on import are undone afterwards."""
    for name in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        monkeypatch.setenv(name, "0" if name == "NCCL_NVLS_ENABLE" else "1")
    monkeypatch.syspath_prepend(str(TOOLS))
    spec = importlib.util.spec_from_file_location("bench_scaling", TOOLS / "bench_scaling.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_scaling", module)
    spec.loader.exec_module(module)
    return module


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
