"""The suite's own hooks: a ``gpu`` test skips, rather than fails, where CUDA is missing; the
``slow`` tests run first; under xdist every process runs one intra-op thread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

SUITE_CONFTEST = Path(__file__).with_name("conftest.py")

GPU_AND_CPU_TESTS = """
import pytest


@pytest.mark.gpu
def test_marked_gpu():
    pass


def test_unmarked():
    pass
"""
"""Two tests that pass wherever they run: only the hook can turn one into a skip."""


SHORT_AND_SLOW_TESTS = """
import pytest


def test_short_first():
    pass


@pytest.mark.slow
def test_slow_first():
    pass


def test_short_second():
    pass


@pytest.mark.slow
def test_slow_second():
    pass
"""


ONE_THREAD_TEST = """
import os
import subprocess
import sys


def test_one_thread_here_and_in_a_subprocess():
    import torch

    assert torch.get_num_threads() == 1
    child = "import os; print(os.environ.get('OMP_NUM_THREADS'))"
    threads = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert threads.stdout.strip() == "1", threads.stderr
"""
"""Passes only where the conftest gave this process one thread and the processes it starts the
setting torch reads for its thread count (a child that imported torch to ask took 14 s of the
suite)."""


def _run_suite_hooks(
    pytester: pytest.Pytester, *args: str, tests: str = GPU_AND_CPU_TESTS
) -> pytest.RunResult:
    pytester.makeini("[pytest]\nmarkers =\n    gpu: needs a CUDA device\n    slow: long\n")
    pytester.makeconftest(SUITE_CONFTEST.read_text())
    pytester.makepyfile(test_mixed=tests)
    return pytester.runpytest_inprocess("-p", "no:randomly", "-p", "no:cacheprovider", *args)


def test_gpu_test_without_cuda_is_skipped_with_the_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = _run_suite_hooks(pytester, "-m", "gpu", "-rs")
    result.assert_outcomes(skipped=1, deselected=1)
    result.stdout.fnmatch_lines(["*gpu test: no CUDA device on this machine*"])


def test_cpu_test_without_cuda_still_runs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = _run_suite_hooks(pytester, "-m", "not gpu")
    result.assert_outcomes(passed=1, deselected=1)


def test_gpu_test_with_cuda_is_not_skipped(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    result = _run_suite_hooks(pytester, "-m", "gpu")
    result.assert_outcomes(passed=1, deselected=1)


def test_gpu_test_left_on_another_stream_fails_and_the_stream_is_reset(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    streams = {"current": "side", "default": "default"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: streams["current"])
    monkeypatch.setattr(torch.cuda, "default_stream", lambda: streams["default"])
    monkeypatch.setattr(torch.cuda, "set_stream", lambda s: streams.update(current=s))
    result = _run_suite_hooks(pytester, "-m", "gpu")
    result.assert_outcomes(passed=1, errors=1, deselected=1)
    result.stdout.fnmatch_lines(["*left the thread on CUDA stream side, not the default stream*"])
    assert streams["current"] == "default"


def test_slow_tests_run_first_each_group_in_its_order(pytester: pytest.Pytester) -> None:
    result = _run_suite_hooks(pytester, "--collect-only", "-q", tests=SHORT_AND_SLOW_TESTS)
    collected = [line for line in result.outlines if line.startswith("test_mixed.py::")]
    assert collected == [
        "test_mixed.py::test_slow_first",
        "test_mixed.py::test_slow_second",
        "test_mixed.py::test_short_first",
        "test_mixed.py::test_short_second",
    ]


@pytest.fixture
def torch_threads_restored() -> Iterator[None]:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("torch_threads_restored")
def test_xdist_worker_and_its_subprocesses_run_one_thread(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # restored after the test
    torch.set_num_threads(2)
    result = _run_suite_hooks(pytester, tests=ONE_THREAD_TEST)
    result.assert_outcomes(passed=1)
