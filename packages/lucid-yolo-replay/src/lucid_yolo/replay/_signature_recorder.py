"""What the two region recorders share: settings, recordings keyed on signatures, counters.

The region recorder (forward and backward) and the forward recorder (no autograd) decide a call
the same way once it may replay: the region's identity is checked (a change retires the
recorder), the call's :class:`~lucid_yolo.replay.signature.Signature` is built, and it runs
native during its warm-up calls, is recorded after them (within ``max_signatures``; a failed
capture runs that signature native), or replays its recording (docs/replay-invariants.md,
invariants 7-12, 19 and 20). Each recorder adds its own conditions before that path and its own
recording and replay.
"""

from __future__ import annotations

import abc
from collections import Counter
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import torch
from torch import Tensor

from lucid_yolo.replay._autograd import unsupported_module
from lucid_yolo.replay._state import StateSnapshot
from lucid_yolo.replay.exceptions import PoolLeakError, ReplayConfigError
from lucid_yolo.replay.pool import ReplayPool
from lucid_yolo.replay.protocols import Region, RegionOutput
from lucid_yolo.replay.retire import RetireLog, Retirement, RetireReason
from lucid_yolo.replay.signature import Binding, Signature, UnsupportedInputError
from lucid_yolo.replay.telemetry import Telemetry, recording_cause

RecordingT = TypeVar("RecordingT")


class SignatureRecorder(abc.ABC, Generic[RecordingT]):
    """Settings, recordings by signature, counters and retirements of a region's recorder.

    The arguments are documented on :class:`~lucid_yolo.replay.RegionRecorder` and
    :class:`~lucid_yolo.replay.ForwardRecorder`.

    Raises:
        ReplayConfigError: a negative ``warmup_steps``, or ``capture_warmup`` or
            ``max_signatures`` below 1.
    """

    def __init__(
        self,
        region: Region,
        *,
        name: str,
        warmup_steps: int,
        capture_warmup: int,
        max_signatures: int,
        pool: ReplayPool | None,
        clone_outputs: bool,
        enabled: bool,
    ) -> None:
        if warmup_steps < 0:
            raise ReplayConfigError(f"warmup_steps={warmup_steps!r}: expected 0 or more")
        if capture_warmup < 1:
            raise ReplayConfigError(
                f"capture_warmup={capture_warmup!r}: expected at least 1, capture must follow "
                "a pass that has seen every kernel and shape"
            )
        if max_signatures < 1:
            raise ReplayConfigError(f"max_signatures={max_signatures!r}: expected at least 1")
        self.region = region
        self.name = name
        self.warmup_steps = warmup_steps
        self.capture_warmup = capture_warmup
        self.max_signatures = max_signatures
        self.clone_outputs = clone_outputs
        self.enabled = enabled
        self.binding = Binding(region.region_modules())
        self.pool = pool if pool is not None else ReplayPool(self._default_device())
        self._telemetry = Telemetry()
        self.retire_log = RetireLog(name)
        self.retired: Retirement | None = None
        self._recordings: dict[Signature, RecordingT] = {}
        self._last_recorded: Signature | None = None
        self._seen: Counter[Signature] = Counter()
        self._native_signatures: set[Signature] = set()
        self.defer_recording = False
        """While set, a signature not recorded yet runs native, counted as a warm-up call,
        instead of recording: for a caller that knows the pool's other graphs are still to come
        (a fit's sanity check evaluates before the training step records), so that the recording
        made once they exist warms up and captures in their free scratch
        (:meth:`ReplayPool.warm_up`) instead of holding blocks of its own beneath them."""

    @property
    def telemetry(self) -> Telemetry:
        """Counters of this recorder (:class:`~lucid_yolo.replay.telemetry.Telemetry`)."""
        return self._telemetry

    @property
    def recordings(self) -> int:
        """Signatures currently recorded."""
        return len(self._recordings)

    def fall_back(self, reason: RetireReason, detail: str) -> None:
        """Count one call that runs native for a per-call ``reason``; the caller runs it.

        Counted as ``native.<reason>`` and ``retired.<reason>`` and warned the first time, so
        that no call falls back without a reason in the telemetry.
        """
        self._telemetry.native_calls[reason.value] += 1
        self._count_retirement(reason, detail)

    def retire(self, reason: RetireReason, detail: str) -> None:
        """Stop replaying for good: every later call runs native. Warned once per reason."""
        self.retired = self._count_retirement(reason, detail)

    def _default_device(self) -> torch.device | None:
        params = self.binding.parameters
        return params[0].device if params else None

    def _count_retirement(self, reason: RetireReason, detail: str) -> Retirement:
        self._telemetry.retirements[reason] += 1
        return self.retire_log.record(reason, detail)

    def _native(self, cause: str, args: Sequence[Any]) -> RegionOutput:
        self._telemetry.native_calls[cause] += 1
        return self.region(*args)

    def _warm_up(self, signature: Signature, args: Sequence[Any]) -> RegionOutput:
        """One of a signature's native calls before its recording."""
        return self._native("warm-up", args)

    def _dispatch(self, args: Sequence[Any]) -> RegionOutput:
        """Run a call that may replay: native, record then replay, or replay."""
        problem = self.binding.check()
        if problem is not None:
            self.retire(*problem)
            return self._native("retired", args)
        try:
            signature = self.binding.signature(args, self.pool.device.type)
        except UnsupportedInputError as error:
            self._count_retirement(RetireReason.UNSUPPORTED_INPUT, str(error))
            return self._native("unsupported-input", args)
        recording = self._recordings.get(signature)
        if recording is None:
            if signature in self._native_signatures:
                return self._native("retired-signature", args)
            self._seen[signature] += 1
            if self.defer_recording or self._seen[signature] <= self.warmup_steps:
                return self._warm_up(signature, args)
            recording = self._record_or_retire(signature, args)
            if recording is None:
                return self._native("retired-signature", args)
        return self._replay_call(recording, args)

    def _ran_natively(self, signature: Signature) -> bool:
        """Whether a native call of ``signature`` came before its recording: what the region
        creates on first use then exists outside the pool, so the recording may warm up in the
        pool's free scratch (:meth:`ReplayPool.warm_up`)."""
        return self._seen[signature] > 1

    def _record_or_retire(self, signature: Signature, args: Sequence[Any]) -> RecordingT | None:
        if len(self._recordings) >= self.max_signatures:
            self._native_signatures.add(signature)
            self._count_retirement(
                RetireReason.SIGNATURE_LIMIT,
                f"{len(self._recordings)} signatures recorded (max_signatures="
                f"{self.max_signatures!r}); pad inputs to fewer shapes or raise the limit",
            )
            return None
        unsupported = unsupported_module(self.binding.submodules)
        if unsupported is not None:
            self.retire(RetireReason.UNSUPPORTED_MODULE, unsupported)
            return None
        tensors = [*self.binding.parameters, *(a for a in args if isinstance(a, Tensor))]
        snapshot = StateSnapshot(self.binding.buffers, [t.device for t in tensors])
        try:
            recording = self._record(signature, args)
        except PoolLeakError:
            raise  # no retirement makes it safe: the leaked block sits in graph scratch
        except Exception as error:
            if self.pool.uses_cuda:
                torch.cuda.synchronize(self.pool.device)
            snapshot.restore(after_failed_capture=True)
            self._native_signatures.add(signature)
            self._count_retirement(RetireReason.CAPTURE_FAILED, str(error))
            return None
        # Warm-up ran real forwards: undo BN statistics and RNG advance, in place (invariant 1).
        snapshot.restore()
        self._telemetry.recordings += 1
        self._telemetry.recorded[recording_cause(self._last_recorded, signature)] += 1
        self._telemetry.pool_bytes = self.pool.pool_bytes()
        self._recordings[signature] = recording
        self._last_recorded = signature
        return recording

    @abc.abstractmethod
    def _record(self, signature: Signature, args: Sequence[Any]) -> RecordingT:
        """Warm up and capture the region over static copies of ``args``."""

    @abc.abstractmethod
    def _replay_call(self, recording: RecordingT, args: Sequence[Any]) -> RegionOutput:
        """Replay ``recording`` for this call, or run it native for a per-call reason."""


__all__ = ["SignatureRecorder"]
