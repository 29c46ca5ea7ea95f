"""SigtermFilter: a loader worker ends on its owner's SIGTERM only, whoever its parent is.

Workers are forked from this process, as the data module's loaders fork them: a forked child has
one thread, so the filter's mask covers all of its threads.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest

from lucid_yolo.train.data.worker_signals import SigtermFilter

pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc"),
    # Python >= 3.12 warns on fork() in a process with threads (numpy's, OpenCV's); the forked
    # worker only sleeps, as a DataLoader worker forked from the same process does its own work
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]

SENDER = "import os, signal, sys; os.kill(int(sys.stdin.readline()), signal.SIGTERM)"


def _serve(owner: int, ready: Connection) -> None:
    SigtermFilter(owner=owner)(0)
    ready.send("ready")
    while True:
        time.sleep(1)


def _worker(owner: int) -> BaseProcess:
    ready, child_end = multiprocessing.Pipe()
    worker = multiprocessing.get_context("fork").Process(target=_serve, args=(owner, child_end))
    worker.start()
    assert ready.recv() == "ready"
    return worker


def _pid(worker: BaseProcess) -> int:
    assert worker.pid is not None
    return worker.pid


def _sender() -> subprocess.Popen[str]:
    """A process that sends SIGTERM to the pid written to its stdin."""
    return subprocess.Popen([sys.executable, "-c", SENDER], stdin=subprocess.PIPE, text=True)


def _send_from(sender: subprocess.Popen[str], pid: int) -> None:
    assert sender.stdin is not None
    sender.stdin.write(f"{pid}\n")
    sender.stdin.close()
    assert sender.wait(timeout=60) == 0


def _wait_until_taken(pid: int) -> None:
    """Until no SIGTERM is pending for ``pid`` (its filter thread took it): SIGTERMs do not
    queue, so a second one sent earlier would merge into the first."""
    bit = 1 << (signal.SIGTERM - 1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        pending = next(line for line in status.splitlines() if line.startswith("ShdPnd:"))
        if not int(pending.split()[1], 16) & bit:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never took its pending SIGTERM")


def _exit_code(worker: BaseProcess) -> int | None:
    worker.join(timeout=60)
    return worker.exitcode


def _stop(worker: BaseProcess) -> None:
    worker.kill()
    worker.join(timeout=60)


def test_sigterm_filter_drops_a_foreign_sigterm_and_exits_on_the_owners() -> None:
    worker = _worker(owner=os.getpid())
    try:
        _send_from(_sender(), _pid(worker))
        _wait_until_taken(_pid(worker))
        os.kill(_pid(worker), signal.SIGTERM)
        assert _exit_code(worker) == 0  # killed by the first signal: -15
    finally:
        _stop(worker)


def test_sigterm_filter_obeys_an_owner_that_is_not_the_parent() -> None:
    # forkserver: the worker's parent is the fork server, the loader's owner another process
    owner = _sender()
    worker = _worker(owner=owner.pid)
    try:
        os.kill(_pid(worker), signal.SIGTERM)  # from the parent, which does not own the loader
        _wait_until_taken(_pid(worker))
        assert worker.is_alive()
        _send_from(owner, _pid(worker))
        assert _exit_code(worker) == 0
    finally:
        _stop(worker)
