"""Counters a logger can read each epoch: recordings, replays, launches, native calls, retirements.

Everything is a plain ``int`` so the dict from :meth:`Telemetry.as_dict` goes straight into any
logger (Lightning's ``log_dict``, TensorBoard, a CSV row) without conversion.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from lucid_yolo.replay.retire import RetireReason


@dataclass
class Telemetry:
    """Mutable counters of one recorder.

    Attributes:
        recordings: signatures captured (forward + backward graphs, or update graphs).
        replays: calls served by replaying a recording.
        graph_launches: graph launches (forward and backward count separately).
        native_calls: calls run eagerly, by cause (``warm-up``, ``no-grad``, ``retired`` ...).
        retirements: retirements by reason.
        pool_bytes: bytes of the recorder's graph pool after its last capture (0 on CPU).
        ungraded: replayed backwards in which a prediction group received no gradient, by group.
    """

    recordings: int = 0
    replays: int = 0
    graph_launches: int = 0
    native_calls: Counter[str] = field(default_factory=Counter)
    retirements: Counter[RetireReason] = field(default_factory=Counter)
    pool_bytes: int = 0
    ungraded: Counter[str] = field(default_factory=Counter)

    def as_dict(self, prefix: str = "") -> dict[str, int]:
        """Flatten to ``{prefix + name: count}``; causes and reasons become ``native.<cause>``
        and ``retired.<reason>`` keys so every value is an ``int``."""
        flat = {
            "recordings": self.recordings,
            "replays": self.replays,
            "graph_launches": self.graph_launches,
            "native_calls": sum(self.native_calls.values()),
            "retirements": sum(self.retirements.values()),
            "pool_bytes": self.pool_bytes,
        }
        flat.update({f"native.{cause}": n for cause, n in sorted(self.native_calls.items())})
        flat.update({f"retired.{r.value}": n for r, n in sorted(self.retirements.items())})
        flat.update({f"ungraded.{group}": n for group, n in sorted(self.ungraded.items())})
        return {prefix + key: value for key, value in flat.items()}


def merge_telemetry(*parts: Telemetry) -> Telemetry:
    """Sum the counters of several recorders (e.g. network region, update, EMA).

    ``pool_bytes`` takes the largest value: recorders of one step usually share one pool.
    """
    total = Telemetry()
    for part in parts:
        total.recordings += part.recordings
        total.replays += part.replays
        total.graph_launches += part.graph_launches
        total.native_calls.update(part.native_calls)
        total.retirements.update(part.retirements)
        total.pool_bytes = max(total.pool_bytes, part.pool_bytes)
        total.ungraded.update(part.ungraded)
    return total


__all__ = ["Telemetry", "merge_telemetry"]
