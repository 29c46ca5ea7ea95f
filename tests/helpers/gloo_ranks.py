"""Spawn processes on the gloo backend (or NCCL, one GPU each), for the tests of distributed code.

``torch.multiprocessing.spawn`` pickles its target by module name, and pytest's importlib mode
gives test modules names a fresh process cannot import: a rank's body lives in a helper module
on the test ``pythonpath`` (``tests/replay/ddp_ranks.py``, ``tests/train/metrics/metric_ranks.py``)
and this module starts the ranks and brings their results back.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

NVLINK_MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
"""Set in every NCCL rank (as ``tools/multi_gpu_env.py`` does for the tools)."""


def _rank_main(
    rank: int,
    world_size: int,
    init_file: str,
    out_dir: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    backend: str,
) -> None:
    torch.set_num_threads(1)
    if backend == "nccl":
        # NVLink multicast off before NCCL starts: the shared GPU hosts require it
        os.environ.update(NVLINK_MULTICAST_OFF)
        # NCCL's object collectives stage through the current device: one GPU per rank
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend, init_method=f"file://{init_file}", rank=rank, world_size=world_size
    )
    try:
        result = fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()
    (Path(out_dir) / f"rank{rank}.pkl").write_bytes(pickle.dumps(result))


def run_ranks(
    fn: Callable[..., Any], world_size: int, tmp_path: Path, *args: Any, backend: str = "gloo"
) -> list[Any]:
    """``fn(rank, world_size, *args)`` in ``world_size`` spawned ranks; their results.

    ``fn`` and ``args`` must pickle by reference (``fn`` defined at the top of a helper module).
    ``backend="nccl"`` needs ``world_size`` CUDA devices; each rank turns NVLink multicast off
    (:data:`NVLINK_MULTICAST_OFF`) before NCCL starts.
    """
    mp.spawn(
        _rank_main,
        args=(world_size, str(tmp_path / "init"), str(tmp_path), fn, args, backend),
        nprocs=world_size,
    )
    return [pickle.loads((tmp_path / f"rank{r}.pkl").read_bytes()) for r in range(world_size)]
