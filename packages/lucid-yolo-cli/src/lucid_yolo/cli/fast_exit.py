"""The ``lucid-yolo`` process ends without CPython's teardown of the objects it built.

Why: once the command has returned, CPython's finalisation still frees, one by one, every object
the process holds (torch, Lightning and their modules, a fit's tensors and graphs). On the dev
machine a process that only imported the CLI's dependencies spent 1.5-1.7 s there after its last
``atexit`` handler, and 0.24 s when the handler ended it with :func:`os._exit` (both measured from
the outside; docs/engineering/whole-fit-speed.md, session 10). The benchmark counts those seconds
in the user's whole fit.

What a program may rely on at exit is kept: the interpreter joins non-daemon threads and runs every
``atexit`` handler first (multiprocessing's children, loggers such as W&B syncing their run),
because :class:`FastExit` registers its handler before the command imports anything that registers
one, and handlers run last-registered first. Then it shuts :mod:`logging` down, flushes the standard
streams and ends the process with the command's exit code. What is skipped is what a kill skips:
``__del__`` methods and finalisers of objects still alive at exit (a file some callback left open
keeps its unwritten buffer, as on any crash of the process).

Only the process entry points use it (the ``lucid-yolo`` script and ``python -m lucid_yolo.cli``):
:func:`lucid_yolo.cli.main.main` called in-process, by tests or a notebook, returns as before. A
command that raises, or is interrupted, leaves no exit code and the interpreter ends as usual,
traceback included.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys


class FastExit:
    """Ends the process at the end of ``atexit`` with :attr:`code`, once it is set."""

    def __init__(self) -> None:
        self.code: int | None = None
        """The command's exit code; ``None`` (it raised, or has not returned) ends as usual."""
        atexit.register(self._exit)

    def _exit(self) -> None:
        if self.code is None:
            return
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(self.code)


__all__ = ["FastExit"]
