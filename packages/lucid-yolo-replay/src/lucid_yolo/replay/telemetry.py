"""Counters a logger can read each epoch: recordings, replays, launches, native calls, retirements.

Every recording after a recorder's first says why it was needed (``recorded.<cause>``), as every
retirement does (``retired.<reason>``): a fault that makes a recorder record again, such as an
input of a new shape or a parameter group added to the optimizer, is as visible in the telemetry
as one that makes it retire (issue 15).

Everything is a plain ``int`` so the dict from :meth:`Telemetry.as_dict` goes straight into any
logger (Lightning's ``log_dict``, TensorBoard, a CSV row) without conversion.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

from lucid_yolo.replay.retire import RetireReason


@dataclass
class Telemetry:
    """Mutable counters of one recorder.

    Attributes:
        recordings: signatures captured (forward + backward graphs, or update graphs).
        recorded: recordings by cause: ``first``, or the fields of the key that differ from
            the previous recording's (:func:`recording_cause`), e.g. ``inputs``.
        replays: calls served by replaying a recording.
        graph_launches: graph launches (forward and backward count separately).
        native_calls: calls run eagerly, by cause (``warm-up``, ``no-grad``, ``retired`` ...).
        retirements: retirements by reason.
        pool_bytes: bytes of the recorder's graph pool after its last capture (0 on CPU).
        ungraded: replayed backwards in which a prediction group received no gradient, by group.
        verified: optimizer steps the verifier re-ran natively and compared.
        parity_mismatches: verified steps whose native digest differed from the replayed one.
        mismatch_key: the first differing digest key of the first mismatch (``""`` if none).
        mismatch_step: the optimizer step of that mismatch (``-1`` if none).
    """

    recordings: int = 0
    recorded: Counter[str] = field(default_factory=Counter)
    replays: int = 0
    graph_launches: int = 0
    native_calls: Counter[str] = field(default_factory=Counter)
    retirements: Counter[RetireReason] = field(default_factory=Counter)
    pool_bytes: int = 0
    ungraded: Counter[str] = field(default_factory=Counter)
    verified: int = 0
    parity_mismatches: int = 0
    mismatch_key: str = ""
    mismatch_step: int = -1

    def record_mismatch(self, key: str, step: int) -> None:
        """Count a verifier mismatch; the first one's key and step are kept."""
        self.parity_mismatches += 1
        if not self.mismatch_key:
            self.mismatch_key, self.mismatch_step = key, step

    def as_dict(self, prefix: str = "") -> dict[str, int]:
        """Flatten to ``{prefix + name: count}``; causes and reasons become ``recorded.<cause>``,
        ``native.<cause>`` and ``retired.<reason>`` keys so every value is an ``int``; the
        verifier's counts follow once it has run (the mismatch key is text: read it from
        :attr:`mismatch_key`)."""
        flat = {
            "recordings": self.recordings,
            "replays": self.replays,
            "graph_launches": self.graph_launches,
            "native_calls": sum(self.native_calls.values()),
            "retirements": sum(self.retirements.values()),
            "pool_bytes": self.pool_bytes,
        }
        flat.update({f"recorded.{cause}": n for cause, n in sorted(self.recorded.items())})
        flat.update({f"native.{cause}": n for cause, n in sorted(self.native_calls.items())})
        flat.update({f"retired.{r.value}": n for r, n in sorted(self.retirements.items())})
        flat.update({f"ungraded.{group}": n for group, n in sorted(self.ungraded.items())})
        if self.verified:
            flat.update(verified=self.verified, parity_mismatches=self.parity_mismatches)
        if self.parity_mismatches:
            flat["mismatch_step"] = self.mismatch_step
        return {prefix + key: value for key, value in flat.items()}


def merge_telemetry(*parts: Telemetry) -> Telemetry:
    """Sum the counters of several recorders (e.g. network region, update, EMA).

    The first part with a mismatch gives the mismatch key and step.

    ``pool_bytes`` takes the largest value: recorders of one step usually share one pool.
    """
    total = Telemetry()
    for part in parts:
        total.recordings += part.recordings
        total.recorded.update(part.recorded)
        total.replays += part.replays
        total.graph_launches += part.graph_launches
        total.native_calls.update(part.native_calls)
        total.retirements.update(part.retirements)
        total.pool_bytes = max(total.pool_bytes, part.pool_bytes)
        total.ungraded.update(part.ungraded)
        total.verified += part.verified
        total.parity_mismatches += part.parity_mismatches
        if part.mismatch_key and not total.mismatch_key:
            total.mismatch_key, total.mismatch_step = part.mismatch_key, part.mismatch_step
    return total


def recording_cause(previous: object | None, key: object) -> str:
    """Why a recorder records ``key``: ``first``, or what changed since its ``previous`` key.

    Keys that are dataclasses or named tuples of one type name their differing fields, joined
    with ``+`` (``inputs``, ``gradients+hyperparameters``); other keys give ``key``.
    """
    if previous is None:
        return "first"
    names = _field_names(key) if type(previous) is type(key) else ()
    changed = [n for n in names if getattr(previous, n) != getattr(key, n)]
    return "+".join(changed) or "key"


def _field_names(key: object) -> tuple[str, ...]:
    if dataclasses.is_dataclass(key):
        return tuple(f.name for f in dataclasses.fields(key))
    return tuple(getattr(type(key), "_fields", ()))


__all__ = ["Telemetry", "merge_telemetry", "recording_cause"]
