"""The warm CLI's server: imports torch and Lightning once, then forks a fresh-looking
``python -m MODULE`` per request (the client and the reasons are in ``warm_cli.py``).

Run as ``python warm_cli_server.py FD PRELOAD``: ``FD`` is a ``SOCK_SEQPACKET`` socket to the
client, ``PRELOAD`` the JSON of a ``warm_cli.Preload``. Messages are one JSON object each. The
server sends ``{"ready": true}`` once it has imported the modules, or ``{"error": why}``; then each
request (``{"module", "args", "cwd", "env"}``, with the write ends of a stdout and a stderr pipe
attached) gets a forked child and, once the child has been reaped, ``{"returncode": n}`` in
:mod:`subprocess`'s terms (the negative signal number of a killed child). A message without pipes
while a child runs (``{"kill": true}``, the client's timeout) kills the child; the channel's end
kills a running child and ends the server.

What a child keeps from a fresh ``python -m`` process: the interpreter and its flags (the server is
``sys.executable`` started by :mod:`subprocess`, as the cold command is), signal dispositions (the
server installs no handler), no faulthandler, torch's intra-op threads (read from the environment
at import: the client starts one server per such environment), its process group, stdin, output
pipes (the server's own output is a pipe too, so ``sys.stdout`` knows it cannot seek), the working
folder, environment, ``sys.argv``, ``sys.orig_argv`` and ``sys.path[0]``. Its exit goes through the
interpreter's own: non-daemon threads joined, ``atexit`` handlers, ``SystemExit`` codes,
tracebacks, an uncaught ``KeyboardInterrupt`` ending by SIGINT. The ``atexit`` handlers that the
late modules registered at import move to just after the command's first one, where a fresh
process registers them (:class:`_LateExitHandlers`). NumPy's global generator is seeded again, as a
fresh import seeds it; ``random`` reseeds itself after a fork. tests/cli/test_warm_cli.py compares
these with a fresh process.

What differs, and is left so: the modules were imported before the child's working folder was on
``sys.path`` (a module of that folder cannot shadow them), under the server's hash seed (the same in
every child, where fresh processes each draw one); the child's parent is the server; a traceback
shows this file's frames above ``runpy``'s; once the module has ended (during the ``atexit``
handlers) ``sys.modules["__main__"]`` and ``sys.argv[0]`` are the server's again. A command that
ends by raising (``SystemExit`` included, as ``--help`` does) goes through the interpreter's
teardown, which in the child also frees torch and Lightning: about a second that a fresh ``--help``
does not spend, since it never imports them. Linux only (``/proc/self/task``, ``os.pidfd_open``).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

_REQUEST_BYTES = 1 << 20
"""The largest request read: one holds a whole environment, a few kilobytes."""


@dataclass(frozen=True)
class _Request:
    module: str
    args: list[str]
    cwd: str
    env: dict[str, str]


@dataclass
class _LateExitHandlers:
    """The ``atexit`` handlers registered while the late modules were imported.

    A fresh ``python -m lucid_yolo.cli fit`` registers ``lucid_yolo.cli.fast_exit``'s handler
    before it imports torch, so torch's, multiprocessing's and ``weakref.finalize``'s handlers run
    before that one ends the process with ``os._exit``. In the server they were registered first,
    and the fast exit would skip them; the child moves them back to where a fresh process has them.
    """

    handlers: list[tuple[Callable[..., object], tuple[Any, ...], dict[str, Any]]] = field(
        default_factory=list
    )

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Note each handler registered inside the ``with`` block."""
        original = atexit.register

        def register(func: Callable[..., object], *args: Any, **kwargs: Any) -> Any:
            self.handlers.append((func, args, kwargs))
            return original(func, *args, **kwargs)

        atexit.register = register  # type: ignore[assignment]
        try:
            yield
        finally:
            atexit.register = original

    def move_after_the_first_registration(self) -> None:
        """Unregister the handlers, and register them again right after the next registration:
        the command's own first, made before a fresh process would import the late modules."""
        for func, _, _ in self.handlers:
            atexit.unregister(func)
        original = atexit.register

        def register(func: Callable[..., object], *args: Any, **kwargs: Any) -> Any:
            atexit.register = original
            result = original(func, *args, **kwargs)
            self.register_again()
            return result

        atexit.register = register  # type: ignore[assignment]

    def register_again(self) -> None:
        """Register the handlers once more (a no-op after the first call)."""
        handlers, self.handlers = self.handlers, []
        for func, args, kwargs in handlers:
            atexit.register(func, *args, **kwargs)


def serve(
    channel: socket.socket, early: list[str], late: list[str]
) -> tuple[_Request, _LateExitHandlers] | None:
    """Import, report, then fork a child per request. Returns only in a child (its request) and
    in the server once the client has closed the channel or the server cannot fork safely."""
    sys.path.pop(0)  # this file's folder; the child puts its working folder there
    for name in early:
        importlib.import_module(name)
    late_handlers = _LateExitHandlers()
    with late_handlers.recording():
        for name in late:
            importlib.import_module(name)
    sys.stdout.flush()
    sys.stderr.flush()
    problem = _fork_hazard([*early, *late])
    _send(channel, {"error": problem} if problem else {"ready": True})
    if problem:
        return None
    while True:
        message, fds, _, _ = socket.recv_fds(channel, _REQUEST_BYTES, 2)
        if not message:
            return None
        if not fds:
            continue  # a kill that arrived after its child had ended
        pid = os.fork()
        if pid == 0:
            channel.close()
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            for fd in fds:
                os.close(fd)
            return _Request(**json.loads(message)), late_handlers
        for fd in fds:
            os.close(fd)  # the child holds them now; the client sees EOF when it is done
        if not _wait_for(pid, channel):
            return None


def _fork_hazard(modules: list[str]) -> str:
    """Why forking now would not give a fresh process's child, or ``""``.

    OpenBLAS (NumPy's and OpenCV's) starts a pool of threads at import, unless
    ``OMP_NUM_THREADS=1`` (set under xdist), and stops it in a ``pthread_atfork`` handler before
    each fork; a child starts its own when it first needs one. So the threads counted are those
    still running after a trial fork: the ones a fork would leave behind, holding their locks.
    """
    trial = os.fork()
    if trial == 0:
        os._exit(0)
    os.waitpid(trial, 0)
    threads = len(os.listdir("/proc/self/task"))
    if threads > 1:
        return (
            f"the warm CLI server runs {threads} threads after importing {modules} and a fork; "
            "fork copies only the calling thread, so a child could hang on a lock another one "
            "held. Find what starts the thread at import"
        )
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return (
            f"importing {modules} initialised CUDA in the warm CLI server, and a forked child "
            "cannot use it. Keep CUDA out of import time"
        )
    return ""


def _wait_for(pid: int, channel: socket.socket) -> bool:
    """Reap the child and send its exit code; kill it when the client asks. ``False`` when the
    client has gone (the child is killed then)."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            ready, _, _ = select.select([pidfd, channel.fileno()], [], [])
            if pidfd in ready:
                _, status = os.waitpid(pid, 0)
                _send(channel, {"returncode": os.waitstatus_to_exitcode(status)})
                return True
            if not channel.recv(_REQUEST_BYTES):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return False
            os.kill(pid, signal.SIGKILL)  # the client's timeout
    finally:
        os.close(pidfd)


def become(request: _Request, late_handlers: _LateExitHandlers) -> None:
    """Make this forked child the process ``python -m MODULE ARGS`` would start."""
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    sys.argv = [request.module, *request.args]  # runpy sets argv[0] to the module's file
    sys.orig_argv = [sys.executable, "-m", request.module, *request.args]
    sys.path.insert(0, os.getcwd())
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()  # a fresh import seeds the legacy global generator from the OS
    late_handlers.move_after_the_first_registration()


def _send(channel: socket.socket, message: Mapping[str, object]) -> None:
    channel.send(json.dumps(message).encode())


if __name__ == "__main__":
    _preload = json.loads(sys.argv[2])
    _child = serve(socket.socket(fileno=int(sys.argv[1])), _preload["early"], _preload["late"])
    if _child is None:
        # the server ran no command: its exit handlers (the preloaded modules') and teardown
        # would only run in its own working folder and cost a second
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    _request, _late_handlers = _child
    become(_request, _late_handlers)
    try:
        runpy.run_module(_request.module, run_name="__main__", alter_sys=True)
    finally:
        _late_handlers.register_again()  # a command that registered no handler of its own
