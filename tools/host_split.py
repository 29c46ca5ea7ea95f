"""Wall-clock seconds of the host in chosen functions, without a profiler.

cProfile on CPython 3.12 listens through ``sys.monitoring``, which reports every thread of the
process into one profile, so the main thread's stack gets other threads' events mixed in (a
validation pass of 2.1 s under it listed 8.5 s cumulative in Lightning's evaluation step, and
15 of its 32 calls), and its per-call cost inflates small calls. Wrapping a handful of
functions with ``time.perf_counter`` instead measures the main thread's wall time inside each,
waits for the interpreter lock included, at about a microsecond a call; nested wrapped
functions are counted inside their callers as well (inclusive seconds).

Used by ``profile_validation.py --host-split`` (a validation pass) and ``host_split_callback.py``
(a real fit's training steps).
"""

from __future__ import annotations

import inspect
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any


def label_of(owner_name: str, name: str) -> str:
    """How a function is named in a split: the last part of its owner's name, then its own."""
    return f"{owner_name.rsplit('.', 1)[-1]}.{name}"


class HostSplit:
    """Inclusive wall seconds and calls per wrapped function, until :meth:`restore`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self._restore: list[Callable[[], None]] = []

    def wrap(self, owner: Any, name: str) -> None:
        """Time ``owner.name`` (a module's function, or a class's method, classmethod or
        staticmethod, its own or inherited) under the label ``<owner>.<name>``."""
        label = label_of(getattr(owner, "__name__", type(owner).__name__), name)
        raw = inspect.getattr_static(owner, name)
        own = name in vars(owner)
        kind = type(raw) if isinstance(raw, (classmethod, staticmethod)) else None
        function = raw.__func__ if kind is not None else raw

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - start
                self.calls[label] += 1

        setattr(owner, name, kind(timed) if kind is not None else timed)
        self._restore.append(
            (lambda: setattr(owner, name, raw)) if own else (lambda: delattr(owner, name))
        )

    def wrap_all(self, targets: Iterable[tuple[Any, str]]) -> None:
        """:meth:`wrap` each ``(owner, name)``."""
        for owner, name in targets:
            self.wrap(owner, name)

    def restore(self) -> None:
        """Put every wrapped function back, last wrapped first."""
        for undo in reversed(self._restore):
            undo()
        self._restore.clear()

    def table(
        self, count: int, per: str = "pass", *, milliseconds: bool = False
    ) -> list[dict[str, Any]]:
        """Per label, seconds (or milliseconds) and calls per ``per`` over ``count`` of them
        (passes, steps), the costliest first."""
        unit, scale = ("ms", 1000.0) if milliseconds else ("seconds", 1.0)
        return [
            {
                "function": label,
                f"{unit}_per_{per}": round(seconds * scale / count, 4),
                f"calls_per_{per}": self.calls[label] / count,
            }
            for label, seconds in sorted(self.seconds.items(), key=lambda item: -item[1])
        ]
