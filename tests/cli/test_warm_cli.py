"""The warm CLI (``warm_cli.py``): a command forked from the server answers as a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import warm_cli  # registered by conftest.py

if TYPE_CHECKING:
    from conftest import CliRunner

STATE_PROBE = """
import faulthandler, json, os, signal, stat, sys, threading
import __main__, torch

print(json.dumps({
    "cwd": os.getcwd(),
    "environ": dict(os.environ),
    "argv": sys.argv,
    "orig_argv": sys.orig_argv,
    "path0": sys.path[0],
    "main": [__main__.__spec__.name, __main__.__file__],
    "flags": list(sys.flags),
    "signals": {int(s): repr(signal.getsignal(s)) for s in signal.valid_signals()},
    "faulthandler": faulthandler.is_enabled(),
    "threads": threading.active_count(),
    "torch_threads": torch.get_num_threads(),
    "stdin": stat.S_IFMT(os.fstat(0).st_mode),
    "streams": [
        [stat.S_ISFIFO(os.fstat(s.fileno()).st_mode), s.isatty(), s.seekable(), s.buffer.seekable(),
         s.encoding, s.errors, s.line_buffering]
        for s in (sys.stdout, sys.stderr)
    ],
}))
"""

DRAW_PROBE = """
import random, numpy
print(random.random(), numpy.random.random())
"""

SLEEP_PROBE = """
import os, pathlib, time
pathlib.Path("pid").write_text(str(os.getpid()))
print("started", flush=True)
time.sleep(600)
"""

LATE_MODULE = """
import atexit
atexit.register(lambda: open("exit-log", "a").write("late module's handler\\n"))
"""

EARLY_EXIT_PROBE = """
import atexit, os
atexit.register(os._exit, 3)  # as lucid_yolo.cli.fast_exit does, before the command's imports
import late_module
atexit.register(lambda: open("exit-log", "a").write("command's handler\\n"))
"""


def _env(cwd: Path) -> dict[str, str]:
    """The CLI tests' environment (conftest.cli_env): this process's, with ``cwd/cache``."""
    return dict(os.environ, XDG_CACHE_HOME=str(cwd / "cache"))


def _probe(folder: Path, name: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(source)
    return folder


@pytest.fixture
def small_server(tmp_path: Path) -> Iterator[warm_cli.WarmServer]:
    """A server that imports nothing more than Python's start, for the protocol's tests."""
    server = warm_cli.WarmServer(_env(tmp_path), warm_cli.Preload())
    yield server
    server.close()


def test_warm_cli_lightning_help_matches_a_fresh_process(
    warm_servers: warm_cli.WarmServers, tmp_path: Path
) -> None:
    args = ("fit", "--help")
    warm = warm_servers.run("lucid_yolo.cli", args, cwd=tmp_path, env=_env(tmp_path), timeout=300)
    cold = warm_cli.run_cold("lucid_yolo.cli", args, cwd=tmp_path, env=_env(tmp_path), timeout=300)
    assert cold.returncode == 0, cold.stderr
    assert (warm.args, warm.returncode, warm.stdout, warm.stderr) == (
        cold.args,
        cold.returncode,
        cold.stdout,
        cold.stderr,
    )


def test_warm_cli_error_exit_code_and_message_come_back(
    warm_servers: warm_cli.WarmServers, tmp_path: Path
) -> None:
    """The same command as test_fast_exit.py's fresh process, with its code and message."""
    args = ("info", "yolo26n", "--imgsz", "600")
    warm = warm_servers.run("lucid_yolo.cli", args, cwd=tmp_path, env=_env(tmp_path), timeout=300)
    assert warm.returncode == 2
    assert warm.stderr.startswith("lucid-yolo: error: image_size=600 is not a positive multiple")
    assert warm.stdout == ""


def test_warm_child_state_matches_a_fresh_process(
    warm_servers: warm_cli.WarmServers, tmp_path: Path
) -> None:
    """Working folder, environment (this test's cache folder), argv, sys.path, __main__, flags,
    signal handlers, faulthandler, threads (torch's too) and standard streams."""
    folder = _probe(tmp_path / "probe", "state_probe", STATE_PROBE)
    env = _env(folder)
    warm = warm_servers.run("state_probe", (), cwd=folder, env=env, timeout=300)
    cold = warm_cli.run_cold("state_probe", (), cwd=folder, env=env, timeout=300)
    assert cold.returncode == 0, cold.stderr
    assert warm.returncode == 0, warm.stderr
    warm_state, cold_state = json.loads(warm.stdout), json.loads(cold.stdout)
    assert warm_state["environ"] == env
    assert warm_state == cold_state


def test_warm_children_each_draw_their_own_random_numbers(
    warm_servers: warm_cli.WarmServers, tmp_path: Path
) -> None:
    folder = _probe(tmp_path, "draw_probe", DRAW_PROBE)
    draws = [
        warm_servers.run("draw_probe", (), cwd=folder, env=_env(folder), timeout=300).stdout
        for _ in range(2)
    ]
    (python_0, numpy_0), (python_1, numpy_1) = (draw.split() for draw in draws)
    assert python_0 != python_1
    assert numpy_0 != numpy_1


def test_warm_cli_timeout_kills_the_child_and_raises(
    small_server: warm_cli.WarmServer, tmp_path: Path
) -> None:
    folder = _probe(tmp_path, "sleep_probe", SLEEP_PROBE)
    with pytest.raises(subprocess.TimeoutExpired) as timed_out:
        small_server.run("sleep_probe", (), cwd=folder, env=_env(folder), timeout=3)
    assert timed_out.value.cmd == [sys.executable, "-m", "sleep_probe"]
    assert timed_out.value.output == b"started\n"
    with pytest.raises(ProcessLookupError):
        os.kill(int((folder / "pid").read_text()), 0)
    _probe(folder, "quick_probe", "print('next')")
    after = small_server.run("quick_probe", (), cwd=folder, env=_env(folder), timeout=60)
    assert (after.returncode, after.stdout) == (0, "next\n")


def _exit_logs(tmp_path: Path, source: str) -> tuple[tuple[int, str], tuple[int, str]]:
    """Exit code and ``exit-log`` of ``source`` run cold, and warm with ``late_module`` preloaded
    as a late module."""
    ends = []
    for how in ("cold", "warm"):
        folder = _probe(tmp_path / how, "exit_probe", source)
        env = _env(folder)
        if how == "cold":
            _probe(folder, "late_module", LATE_MODULE)
            done = warm_cli.run_cold("exit_probe", (), cwd=folder, env=env, timeout=60)
        else:
            env["PYTHONPATH"] = str(_probe(tmp_path / "modules", "late_module", LATE_MODULE))
            server = warm_cli.WarmServer(env, warm_cli.Preload(late=("late_module",)))
            try:
                done = server.run("exit_probe", (), cwd=folder, env=env, timeout=60)
            finally:
                server.close()
        log = folder / "exit-log"
        ends.append((done.returncode, log.read_text() if log.is_file() else ""))
    return ends[0], ends[1]


def test_warm_child_runs_late_exit_handlers_in_a_fresh_process_order(tmp_path: Path) -> None:
    """In a fresh process the command's first handler (the CLI's fast exit) comes before its
    imports' handlers, which therefore run before it, after the handlers registered later."""
    cold, warm = _exit_logs(tmp_path, EARLY_EXIT_PROBE)
    assert cold == (3, "command's handler\nlate module's handler\n")
    assert warm == cold


def test_warm_child_runs_late_exit_handlers_when_the_command_registers_none(
    tmp_path: Path,
) -> None:
    cold, warm = _exit_logs(tmp_path, "import late_module")
    assert cold == (0, "late module's handler\n")
    assert warm == cold


def test_warm_child_ends_by_sigint_on_an_uncaught_keyboard_interrupt(
    small_server: warm_cli.WarmServer, tmp_path: Path
) -> None:
    folder = _probe(tmp_path, "interrupt_probe", "raise KeyboardInterrupt")
    warm = small_server.run("interrupt_probe", (), cwd=folder, env=_env(folder), timeout=60)
    cold = warm_cli.run_cold("interrupt_probe", (), cwd=folder, env=_env(folder), timeout=60)
    assert cold.returncode == -2
    assert (warm.returncode, warm.stderr.splitlines()[-1]) == (-2, cold.stderr.splitlines()[-1])


def test_warm_cli_server_output_at_import_is_refused(tmp_path: Path) -> None:
    """A fresh process would print it in the command's output: the warm path cannot hide it."""
    modules = _probe(tmp_path, "noisy", "import sys; print('noise at import', file=sys.stderr)")
    env = dict(_env(tmp_path), PYTHONPATH=str(modules))
    with pytest.raises(warm_cli.WarmCliError, match=r"wrote 'noise at import.*' to its own output"):
        warm_cli.WarmServer(env, warm_cli.Preload(late=("noisy",)))


def test_warm_cli_server_with_a_thread_after_import_is_refused(tmp_path: Path) -> None:
    source = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True)"
    modules = _probe(tmp_path, "threaded", f"{source}.start()")
    env = dict(_env(tmp_path), PYTHONPATH=str(modules))
    with pytest.raises(warm_cli.WarmCliError, match="runs 2 threads after importing"):
        warm_cli.WarmServer(env, warm_cli.Preload(early=("threaded",)))


def test_warm_cli_server_ended_before_a_command_is_an_error(
    small_server: warm_cli.WarmServer, tmp_path: Path
) -> None:
    small_server.process.kill()
    small_server.process.wait()
    with pytest.raises(warm_cli.WarmCliError, match="ended with code -9 while taking"):
        small_server.run("json.tool", ("--help",), cwd=tmp_path, env=_env(tmp_path), timeout=60)


def test_warm_cli_server_ended_during_a_command_is_an_error(
    small_server: warm_cli.WarmServer, tmp_path: Path
) -> None:
    folder = _probe(
        tmp_path, "parent_killer", "import os, signal; os.kill(os.getppid(), signal.SIGKILL)"
    )
    with pytest.raises(warm_cli.WarmCliError, match="ended with code -9 while running"):
        small_server.run("parent_killer", (), cwd=folder, env=_env(folder), timeout=60)


def test_cli_runs_commands_warm_by_default(cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []

    def warm(self: object, module: str, args: tuple[str, ...], **_: object) -> object:
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.delenv(warm_cli.COLD_VARIABLE, raising=False)
    monkeypatch.setattr(warm_cli.WarmServers, "run", warm)
    cli("--help")
    assert calls == [("--help",)]


def test_cli_runs_a_fresh_process_with_the_cold_variable(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    def warm(*_: object, **__: object) -> object:
        raise AssertionError("the warm path ran")

    monkeypatch.setenv(warm_cli.COLD_VARIABLE, "1")
    monkeypatch.setattr(warm_cli.WarmServers, "run", warm)
    done = cli("--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: lucid-yolo")
