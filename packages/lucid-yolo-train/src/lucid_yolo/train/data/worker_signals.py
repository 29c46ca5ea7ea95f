"""Loader workers leave a SIGTERM from anyone but the loader's own process to that process.

A SIGTERM sent to the whole process group (a time limit, ``kill -TERM -<pgid>``; Slurm's
``scancel`` signals every process of the job) also reaches the loader workers. torch's handler
lets a worker die of a SIGTERM that does not come from its parent; the main process's SIGCHLD
handler then raised ``DataLoader worker ... is killed by signal: Terminated`` in the middle of a
step or of the SIGTERM save, so no checkpoint was written (seen on the GPU machine, issue 15).

:class:`SigtermFilter` is the loaders' ``worker_init_fn``: the worker blocks SIGTERM and one
daemon thread takes it with ``sigwaitinfo``, which tells the sender (a Python signal handler is
not told). From the process that created the loader (how torch's shutdown and ``multiprocessing``
stop a worker) the worker exits at once, as torch's handler does; from anyone else the signal is
dropped, and the main process stops the fit at the batch's end. A worker whose main process is
gone still exits: torch's worker loop watches its parent.

The owner is recorded when the loader is built, not read as the worker's parent: under the
``fork`` and ``spawn`` start methods they are the same process, but under ``forkserver`` (Python
3.14's default on Linux) the parent is the fork server, and the owner's own shutdown signal would
be dropped.

Complete under ``fork`` only: there a worker starts with one thread, so the mask covers every
thread. A worker started by ``spawn`` already runs numpy's and OpenCV's threads (started on
import, before ``worker_init_fn``), which do not block SIGTERM, so a foreign SIGTERM can still
end it (docs/engineering/whole-fit-speed.md, the review of this filter).
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class SigtermFilter:
    """``worker_init_fn`` of a DataLoader: a SIGTERM ends the worker only if ``owner`` sent it.

    Attributes:
        owner: pid of the process that iterates the loader (``os.getpid()`` when building it).
    """

    owner: int

    def __call__(self, worker_id: int) -> None:
        # Blocked before the thread starts, so every thread of the worker blocks it (a thread
        # inherits its creator's mask) and a pending SIGTERM waits for `sigwaitinfo` alone.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        threading.Thread(target=self._wait, name="sigterm", daemon=True).start()

    def _wait(self) -> None:
        while True:
            if signal.sigwaitinfo({signal.SIGTERM}).si_pid == self.owner:
                os._exit(0)


__all__ = ["SigtermFilter"]
