"""The process entry's exit: atexit handlers, logging and the streams, without object teardown."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import atexit, logging, logging.handlers, sys
from lucid_yolo.cli.fast_exit import FastExit

ending = FastExit()

class Alive:
    def __del__(self):
        print("teardown ran", flush=True)

alive = Alive()
buffered = logging.handlers.MemoryHandler(
    capacity=100, flushLevel=logging.CRITICAL, target=logging.StreamHandler(sys.stdout)
)
log = logging.getLogger("probe")
log.addHandler(buffered)
log.warning("logged before the exit")
atexit.register(lambda: print("later handler ran"))
print("output", end=" ")
if sys.argv[1] == "returned":
    ending.code = 3
sys.exit(3)
"""


def _end(how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, how], capture_output=True, text=True, check=False
    )


def test_fast_exit_keeps_handlers_logs_output_and_code_but_skips_teardown() -> None:
    done = _end("returned")
    assert done.returncode == 3, done.stderr
    assert "output" in done.stdout
    assert "later handler ran" in done.stdout
    assert "logged before the exit" in done.stdout
    assert "teardown ran" not in done.stdout


def test_without_an_exit_code_the_interpreter_ends_as_usual() -> None:
    done = _end("raised")
    assert done.returncode == 3, done.stderr
    assert "later handler ran" in done.stdout
    assert "logged before the exit" in done.stdout
    assert "teardown ran" in done.stdout


def test_the_module_entry_exits_with_the_commands_code() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lucid_yolo.cli", "info", "yolo26n", "--imgsz", "600"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("lucid-yolo: error: image_size=600 is not a positive multiple")
