"""A warm ``python -m lucid_yolo.cli`` for the CLI tests: one server per xdist worker imports torch
and Lightning once, and each command runs in a child forked from it.

Why: a fresh CLI process spent about 6 of its 9 seconds importing torch and Lightning
(``python -X importtime -c "import lucid_yolo.cli.lightning_cli"``: 5.9 s on the 2-core dev
machine), and ``tests/cli`` ran about 16 of them (docs/engineering/suite-time.md, session 40).

How: :class:`WarmServer` starts ``warm_cli_server.py`` with the caller's environment and a
``SOCK_SEQPACKET`` socket; that file's docstring gives the protocol and what a forked child keeps
from a fresh process and what differs. For each command the client sends the write ends of two
pipes, reads the pipes until they close, as ``subprocess.run(capture_output=True)`` does, and at the
timeout asks the server to kill the child. :class:`WarmServers` keeps one server per environment
as it was at import (every variable but :data:`CALL_TIME_VARIABLES`), so a command whose
environment differs there (``OMP_NUM_THREADS``, ``PYTHONWARNINGS``) gets a server started with it.

Import-time output (a warning, a notice) goes to the server, not to each command as in a fresh
process: :class:`WarmServer` raises when the server wrote anything, so that a test of a command's
output cannot pass because the noise moved away. ``LUCID_TEST_COLD_CLI=1`` runs every command as a
fresh process instead (tests/cli/conftest.py).
"""

from __future__ import annotations

import json
import locale
import os
import select
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SERVER = Path(__file__).with_name("warm_cli_server.py")

COLD_VARIABLE = "LUCID_TEST_COLD_CLI"
"""Set to ``1``, the CLI tests run every command as a fresh process (tests/cli/conftest.py)."""

CALL_TIME_VARIABLES = (
    "XDG_CACHE_HOME",  # read when a dataset or weights are cached
    "PYTEST_CURRENT_TEST",  # pytest's name of the running test, different in each
    "PYTORCH_CUDA_ALLOC_CONF",  # these three when CUDA's allocator starts, after the fork
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
)
"""Variables read after a command starts, so one server serves any value of them."""

START_TIMEOUT_S = 600.0
"""How long a server may take to import its :class:`Preload` (6 s idle, much more under load)."""

_REPLY_BYTES = 1 << 16


class WarmCliError(RuntimeError):
    """The warm path cannot run a command as a fresh process would; the message says why."""


@dataclass(frozen=True)
class Preload:
    """What a server imports before it forks."""

    early: tuple[str, ...] = ()
    """Modules ``python -m`` imports before the command's first line runs (the module's package,
    what its ``__main__`` imports): their ``atexit`` handlers stay first."""
    late: tuple[str, ...] = ()
    """Modules the command imports once it runs: their ``atexit`` handlers move to just after the
    command's first, where a fresh process registers them."""


CLI_PRELOAD = Preload(early=("lucid_yolo.cli.main",), late=("lucid_yolo.cli.lightning_cli",))
"""torch, Lightning and the CLI: what ``python -m lucid_yolo.cli fit`` imports before it works."""


class WarmServer:
    """A server process and its channel; :meth:`run` runs one command in a forked child.

    Args:
        env: the server's environment (what its imports read).
        preload: the modules it imports before it forks.

    Raises:
        WarmCliError: the server did not start, ran threads or CUDA after its imports, or wrote
            to its own output while importing.
    """

    def __init__(self, env: Mapping[str, str], preload: Preload) -> None:
        self._channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # a pipe, as a fresh process's output is: each child's sys.stdout and sys.stderr are the
        # server's, whose buffered and text layers note at start whether their fd can seek
        self._output, output_w = os.pipe()
        os.set_blocking(self._output, False)
        self._said = bytearray()
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), str(theirs.fileno()), json.dumps(asdict(preload))],
            env=dict(env),
            stdout=output_w,
            stderr=output_w,
            pass_fds=[theirs.fileno()],
        )
        theirs.close()
        os.close(output_w)
        self.closed = False
        try:
            ready = self._receive(time.monotonic() + START_TIMEOUT_S, "importing its modules")
            if "error" in ready:
                raise WarmCliError(f"{ready['error']}, or set {COLD_VARIABLE}=1 to run cold")
            self._check_quiet("while it imported its modules")
        except BaseException:
            self.close()
            raise

    def run(
        self,
        module: str,
        args: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout: float | None,
    ) -> subprocess.CompletedProcess[str]:
        """``python -m MODULE ARGS`` in ``cwd`` with ``env``, as ``subprocess.run(...,
        capture_output=True, text=True, timeout=timeout)`` runs it.

        Raises:
            subprocess.TimeoutExpired: the command ran past ``timeout``; the child was killed, and
                the exception holds the output read until then, in bytes, as subprocess's does.
            WarmCliError: the server ended, or wrote to its own output.
        """
        command = [sys.executable, "-m", module, *args]
        request = {"module": module, "args": list(args), "cwd": str(cwd), "env": dict(env)}
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            try:
                socket.send_fds(self._channel, [json.dumps(request).encode()], [out_w, err_w])
            except OSError as error:
                raise WarmCliError(self._death(f"taking {command!r}", timed_out=False)) from error
            finally:
                os.close(out_w)
                os.close(err_w)
            returncode, out, err = self._communicate(command, out_r, err_r, timeout)
        except subprocess.TimeoutExpired:
            raise
        except BaseException:
            self.close()  # the server kills the child when its channel closes
            raise
        finally:
            os.close(out_r)
            os.close(err_r)
        self._check_quiet(f"while it ran {command!r}")
        return subprocess.CompletedProcess(command, returncode, _text(out), _text(err))

    def close(self) -> None:
        """End the server (it kills a child still running) and wait for it."""
        if self.closed:
            return
        self.closed = True
        self._channel.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._output)

    def _communicate(
        self, command: list[str], out_r: int, err_r: int, timeout: float | None
    ) -> tuple[int, bytes, bytes]:
        """Read both pipes to their end and the child's exit code, as ``Popen.communicate``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        returncode: int | None = None
        open_pipes = {out_r, err_r}
        with selectors.DefaultSelector() as selector:
            for fd in (out_r, err_r, self._channel.fileno(), self._output):
                selector.register(fd, selectors.EVENT_READ)
            while returncode is None or open_pipes:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    if returncode is None:
                        self._channel.send(b'{"kill": true}')
                        self._receive(None, f"killing {command!r}")
                    assert timeout is not None
                    raise subprocess.TimeoutExpired(
                        command,
                        timeout,
                        output=b"".join(chunks[out_r]) if chunks[out_r] else None,
                        stderr=b"".join(chunks[err_r]) if chunks[err_r] else None,
                    )
                for key, _ in selector.select(remaining):
                    if key.fd == self._output:
                        if not self._drain():
                            selector.unregister(key.fd)  # the server has ended
                    elif key.fd == self._channel.fileno():
                        returncode = int(self._receive(None, f"running {command!r}")["returncode"])
                        selector.unregister(key.fd)
                    elif data := os.read(key.fd, 1 << 16):
                        chunks[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
                        open_pipes.discard(key.fd)
        return returncode, b"".join(chunks[out_r]), b"".join(chunks[err_r])

    def _receive(self, deadline: float | None, doing: str) -> dict[str, Any]:
        """The server's next message, reading its own output meanwhile."""
        watched = [self._channel.fileno(), self._output]
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select(watched, [], [], remaining)
            if not ready:
                raise WarmCliError(self._death(doing, timed_out=True))
            if self._output in ready and not self._drain():
                watched.remove(self._output)  # the server has ended
            if self._channel.fileno() in ready:
                break
        message = self._channel.recv(_REPLY_BYTES)
        if not message:
            raise WarmCliError(self._death(doing, timed_out=False))
        reply: dict[str, Any] = json.loads(message)
        return reply

    def _drain(self) -> bool:
        """Keep what the server has written to its own output; whether it may write more."""
        while True:
            try:
                data = os.read(self._output, 1 << 16)
            except BlockingIOError:
                return True
            if not data:
                return False
            self._said += data

    def _death(self, doing: str, *, timed_out: bool) -> str:
        if timed_out:
            self.process.kill()
        try:
            code = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._drain()
        return (
            f"the warm CLI server (pid {self.process.pid}) ended with code {code} while {doing}; "
            f"its output: {self._said.decode(errors='replace')!r}. Set {COLD_VARIABLE}=1 to run "
            "the commands as fresh processes"
        )

    def _check_quiet(self, when: str) -> None:
        self._drain()
        if self._said:
            said = self._said.decode(errors="replace")
            self.close()
            raise WarmCliError(
                f"the warm CLI server wrote {said!r} to its own output {when}. A fresh process "
                "writes that into each command's output, which the warm path cannot reproduce; "
                f"find its source (set {COLD_VARIABLE}=1 to see where it lands)"
            )


class WarmServers:
    """One :class:`WarmServer` per import-time environment, started when first asked for."""

    def __init__(self, preload: Preload) -> None:
        self._preload = preload
        self._servers: dict[frozenset[tuple[str, str]], WarmServer] = {}

    def run(
        self,
        module: str,
        args: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout: float | None,
    ) -> subprocess.CompletedProcess[str]:
        """:meth:`WarmServer.run` on the server of ``env``'s import-time part."""
        key = frozenset((k, v) for k, v in env.items() if k not in CALL_TIME_VARIABLES)
        server = self._servers.get(key)
        if server is None or server.closed:  # a server ends with the run that failed on it
            server = self._servers[key] = WarmServer(env, self._preload)
        return server.run(module, args, cwd=cwd, env=env, timeout=timeout)

    def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()


def run_cold(
    module: str, args: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float | None
) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` as a fresh process (what the warm path stands in for)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _text(data: bytes) -> str:
    """Bytes decoded as ``subprocess.run(text=True)`` decodes a pipe: the locale's encoding,
    universal newlines."""
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")
