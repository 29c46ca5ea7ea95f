"""The environment every multi-GPU command of this repository runs with: NVLink multicast off.

NCCL's NVLink SHARP (NVLS) and PyTorch's / NVSHMEM's multicast objects can put a shared host's
GPUs out of service; the GPU machines of this project require them off (NCCL_NVLS_ENABLE=0 and
the two variables below) in every process, including the ones a launcher starts with an
environment of its own. The tools import this before torch and pass :func:`child_env` to every
subprocess.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

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


def run_group(
    command: Sequence[str],
    timeout: float,
    extra_env: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in its own process group with :func:`child_env` (plus ``extra_env``);
    past ``timeout`` seconds the whole group (a launcher and every rank it started) is stopped,
    so no orphaned rank keeps a GPU busy. Returns status -9 when it was stopped."""
    process = subprocess.Popen(
        list(command),
        env=child_env(**(extra_env or {})),
        start_new_session=True,
        text=True,
        **kwargs,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            stdout, stderr = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        return subprocess.CompletedProcess(process.args, -9, stdout, stderr)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
