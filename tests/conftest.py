"""Suite-wide test settings and fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

pytest_plugins = ["pytester"]

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One intra-op thread per xdist worker and per process a test starts (the environment
    # variable reaches subprocesses, spawned ranks and forkservers; set_num_threads this
    # process): the workers already fill the cores, and torch's default (one thread per core in
    # every process) oversubscribes them several times over. Oversubscribed, OpenMP threads
    # wait on each other: a resume-harness fit took 182 s of wall and 47 s of CPU with two
    # threads at load 13, 10 s and 3 s with one (docs/engineering/suite-time.md).
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def pytest_sessionstart(session: pytest.Session) -> None:
    """With ``LUCID_YOLO_MEMORY_HISTORY=1`` on a CUDA machine, record where every CUDA block is
    allocated, so that a ``PoolLeakError`` names the line that made the block it found alive
    (slower; for chasing a leak that the suite alone shows)."""
    if os.environ.get("LUCID_YOLO_MEMORY_HISTORY") == "1" and torch.cuda.is_available():
        torch.cuda.memory._record_memory_history(enabled="state", stacks="python")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the ``slow`` tests first; skip ``gpu`` tests where there is no CUDA device."""
    _slow_tests_first(items)
    _skip_gpu_tests_without_cuda(items)


def _slow_tests_first(items: list[pytest.Item]) -> None:
    """Move the ``slow`` tests to the front, in their order; the rest keep theirs.

    Under ``-n`` the workers then start with the long tests and end on short ones, which
    ``--dist worksteal`` (the test command) moves to an idle worker, instead of one worker
    running the last long fit while the other has nothing left
    (docs/engineering/workspace-foundation.md).
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _skip_gpu_tests_without_cuda(items: list[pytest.Item]) -> None:
    """Skip ``gpu``-marked tests where there is no CUDA device, with the reason in the report.

    ``-m gpu`` on a CPU machine then reports skips rather than CUDA errors, and a test module
    needs only the ``gpu`` mark, not its own ``skipif``.
    """
    if torch.cuda.is_available():
        return
    no_cuda = pytest.mark.skip(reason="gpu test: no CUDA device on this machine")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(no_cuda)


@pytest.fixture(autouse=True)
def _gpu_test_ends_on_the_default_stream(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a ``gpu`` test that leaves the thread on another CUDA stream, and put it back.

    Every later test of the process would otherwise run on that stream, and a graph pool given
    the same stream by torch's round-robin would take the test's allocations into its warm-ups
    (docs/engineering/whole-fit-speed.md, session 16).
    """
    yield
    if request.node.get_closest_marker("gpu") is None or not torch.cuda.is_initialized():
        return
    current, default = torch.cuda.current_stream(), torch.cuda.default_stream()
    if current != default:
        torch.cuda.set_stream(default)
        pytest.fail(f"the test left the thread on CUDA stream {current}, not the default stream")


@pytest.fixture
def deterministic() -> Iterator[None]:
    """cuDNN deterministic, no benchmark, deterministic algorithms; restored afterwards.

    Parity tests compare bits, so native and replayed runs must pick the same kernels
    (docs/replay-invariants.md, invariant 22); cuBLAS also needs
    ``CUBLAS_WORKSPACE_CONFIG=:4096:8``, which ``make test-gpu`` sets.
    """
    saved = (
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        torch.are_deterministic_algorithms_enabled(),
    )
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)
    yield
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved[:2]
    torch.use_deterministic_algorithms(saved[2])
