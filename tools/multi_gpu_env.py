"""The environment every multi-GPU command of this repository runs with: NVLink multicast off.

NCCL's NVLink SHARP (NVLS) and PyTorch's / NVSHMEM's multicast objects can put a shared host's
GPUs out of service; the GPU machines of this project require them off (NCCL_NVLS_ENABLE=0 and
the two variables below) in every process, including the ones a launcher starts with an
environment of its own. The tools import this before torch and pass :func:`child_env` to every
subprocess.
"""

from __future__ import annotations

import os

MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def multicast_off() -> None:
    """Set :data:`MULTICAST_OFF` in this process's environment (before NCCL initialises)."""
    os.environ.update(MULTICAST_OFF)


def child_env(**extra: str) -> dict[str, str]:
    """This environment with :data:`MULTICAST_OFF` and ``extra``, for a subprocess."""
    return {**os.environ, **MULTICAST_OFF, **extra}
