"""Update replay: the optimizer step and other in-place updates recorded as graphs.

An update is a fixed sequence of device ops on tensors that keep their addresses (parameters,
optimizer state, EMA weights). After ``warmup_steps`` native calls — which also create lazily
initialised optimizer state — the update is captured once and replayed. Anything a graph would
bake (the parameters' addresses, Python-scalar hyperparameters, which parameters have gradients,
gradient layouts, a replaced optimizer state) is part of the key, so a change records again or
retires (docs/replay-invariants.md, invariants 15 and 23).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from itertools import chain, repeat
from operator import attrgetter, is_not, itemgetter
from typing import Any, NamedTuple

import torch
from torch import Tensor

from lucid_yolo.replay._copies import copy_grouped
from lucid_yolo.replay._getters import GRAD, IS_SET, REQUIRES_GRAD
from lucid_yolo.replay._graphs import UpdateGraph
from lucid_yolo.replay._state import StateSnapshot
from lucid_yolo.replay.exceptions import ReplayConfigError
from lucid_yolo.replay.pool import ReplayPool
from lucid_yolo.replay.protocols import UpdateOptimizer
from lucid_yolo.replay.retire import RetireLog, Retirement, RetireReason
from lucid_yolo.replay.signature import TensorSpec
from lucid_yolo.replay.telemetry import Telemetry, recording_cause

_SHAPE = attrgetter("shape")
_DTYPE = attrgetter("dtype")
_DEVICE = attrgetter("device")
_PARAMS = itemgetter("params")


class GradientLayouts(NamedTuple):
    """The layout of every parameter's gradient, column by column.

    Built in C-level passes (``map`` over getters) instead of one :class:`TensorSpec` per
    gradient: an update keys on a few hundred gradients at every step, and at small batch the
    replayed step is bound by the host's work. It holds what a :class:`TensorSpec` per gradient
    would.
    """

    present: tuple[bool, ...]
    """Per parameter, in group order: whether it has a gradient."""
    shapes: tuple[torch.Size, ...]
    """Per gradient present, in the same order: its shape; the columns below likewise."""
    strides: tuple[tuple[int, ...], ...]
    dtypes: tuple[torch.dtype, ...]
    devices: tuple[torch.device, ...]
    requires_grad: tuple[bool, ...]

    @classmethod
    def of(cls, params: Sequence[Tensor]) -> GradientLayouts:
        """The layouts of the ``.grad`` of each of ``params``."""
        grads = list(map(GRAD, params))
        present = list(filter(IS_SET, grads))
        return cls(
            tuple(map(is_not, grads, repeat(None))),
            tuple(map(_SHAPE, present)),
            tuple(map(Tensor.stride, present)),
            tuple(map(_DTYPE, present)),
            tuple(map(_DEVICE, present)),
            tuple(map(REQUIRES_GRAD, present)),
        )


class UpdateKey(NamedTuple):
    """What an optimizer step's graph bakes in: the parameters' addresses and what lies beyond."""

    parameters: tuple[int, ...]
    """Per parameter, in group order: its storage address (``data_ptr``). A graph writes the
    addresses it was recorded on: a parameter replaced in a group, moved (``.to()``) or given new
    storage (``.data =``) would otherwise be left unchanged while the old memory is written."""
    gradients: GradientLayouts
    """Which parameters have a gradient, and each gradient's layout."""
    hyperparameters: tuple[tuple[tuple[str, Hashable], ...], ...]
    """Per group: every setting but ``params``, as :func:`hyperparameter_key` keys it."""
    state: int
    """How many times the optimizer's ``state`` dict has been replaced since construction
    (``Optimizer.load_state_dict`` builds a new one, and torch's optimizers fill it with new
    tensors that a recorded graph would never read); one identity check per step."""


class UpdateRecorder:
    """Records a no-argument in-place update after warm-up and replays it.

    Args:
        body: the update; reads and writes only tensors with fixed addresses.
        state: returns every tensor ``body`` writes, snapshotted around capture so that the CPU
            stand-in's checking run (and any failure) leaves no trace.
        key: returns what the recording depends on beyond those tensors; a new key records again.
        capture_body: builds, for a key, the callable to capture instead of ``body`` (e.g. one
            that reads static buffers); ``None`` captures ``body``.
        before_launch: copies a key's live inputs into its static buffers before each launch.
        after_launch: copies what a launch wrote into static buffers back to the live tensors.
        name: quoted in warnings.
        warmup_steps: native calls per key before recording.
        max_signatures: keys recorded at most; further keys run native.
        pool: shared memory pool and side stream; ``None`` makes a private one.
        enabled: ``False`` always runs native.

    Raises:
        ReplayConfigError: for a negative ``warmup_steps`` or ``max_signatures`` below 1.
    """

    def __init__(
        self,
        body: Callable[[], object],
        *,
        state: Callable[[], Sequence[Tensor]],
        key: Callable[[], Hashable] = lambda: None,
        capture_body: Callable[[Hashable], Callable[[], object]] | None = None,
        before_launch: Callable[[Hashable], None] | None = None,
        after_launch: Callable[[Hashable], None] | None = None,
        name: str = "update",
        warmup_steps: int = 1,
        max_signatures: int = 2,
        pool: ReplayPool | None = None,
        enabled: bool = True,
    ) -> None:
        if warmup_steps < 0:
            raise ReplayConfigError(f"warmup_steps={warmup_steps!r}: expected 0 or more")
        if max_signatures < 1:
            raise ReplayConfigError(f"max_signatures={max_signatures!r}: expected at least 1")
        self.body, self.state, self.key = body, state, key
        self.capture_body = capture_body
        self.before_launch = before_launch
        self.after_launch = after_launch
        self.name = name
        self.warmup_steps = warmup_steps
        self.max_signatures = max_signatures
        self.enabled = enabled
        self.pool = pool
        self._telemetry = Telemetry()
        self.retire_log = RetireLog(name)
        self.retired: Retirement | None = None
        self._graphs: dict[Hashable, UpdateGraph] = {}
        self._last_recorded: Hashable | None = None
        self._seen: Counter[Hashable] = Counter()
        self._native_keys: set[Hashable] = set()

    def __call__(self) -> None:
        """Run the update: native (warm-up, retired, new key past the limit) or replayed."""
        if not self.enabled:
            return self._native("disabled")
        busy = None if self.pool is None else self.pool.busy()
        if busy is not None:
            return self._native(busy)
        if self.retired is not None:
            return self._native("retired")
        key = self.key()
        graph = self._graphs.get(key)
        if graph is None:
            if key in self._native_keys:
                return self._native("retired-signature")
            self._seen[key] += 1
            if self._seen[key] <= self.warmup_steps:
                return self._native("warm-up")
            graph = self._record(key)
            if graph is None:
                return self._native("retired-signature")
        if self.before_launch is not None:
            self.before_launch(key)
        graph.launch()
        if self.after_launch is not None:
            self.after_launch(key)
        self._telemetry.replays += 1
        self._telemetry.graph_launches += 1
        return None

    @property
    def telemetry(self) -> Telemetry:
        """Counters of this recorder (:class:`~lucid_yolo.replay.telemetry.Telemetry`)."""
        return self._telemetry

    def retire(self, reason: RetireReason, detail: str) -> None:
        """Stop replaying for good; warned once per reason."""
        self._telemetry.retirements[reason] += 1
        self.retired = self.retire_log.record(reason, detail)

    def _native(self, cause: str) -> None:
        self._telemetry.native_calls[cause] += 1
        self.body()

    def _pool(self) -> ReplayPool:
        if self.pool is None:
            tensors = self.state()
            self.pool = ReplayPool(tensors[0].device if tensors else None)
        return self.pool

    def _record(self, key: Hashable) -> UpdateGraph | None:
        pool = self._pool()
        if len(self._graphs) >= self.max_signatures:
            self._native_keys.add(key)
            self._telemetry.retirements[RetireReason.SIGNATURE_LIMIT] += 1
            self.retire_log.record(
                RetireReason.SIGNATURE_LIMIT,
                f"{len(self._graphs)} update signatures recorded; a Python-scalar "
                "hyperparameter probably changes every step: hold it as a device tensor",
            )
            return None
        tensors = self.state()
        # A CUDA capture records the update's device kernels without running them, so only host
        # tensors (a CPU step count) change, besides the RNG; the CPU stand-in runs the body and
        # changes all. Copying the device state too held one more copy of the parameters, the
        # optimizer state and the EMA while recording (35 MiB for yolo26n-seg; issue 11, memory).
        changed = [t for t in tensors if not (pool.uses_cuda and t.is_cuda)]
        snapshot = StateSnapshot(changed, [t.device for t in tensors])
        graph = UpdateGraph(pool)
        try:
            body = self.body if self.capture_body is None else self.capture_body(key)
            with pool.side_stream():
                graph.capture(body)
        except Exception as error:
            if pool.uses_cuda:
                torch.cuda.synchronize(pool.device)
            snapshot.restore(after_failed_capture=True)
            self._native_keys.add(key)
            self._telemetry.retirements[RetireReason.CAPTURE_FAILED] += 1
            self.retire_log.record(RetireReason.CAPTURE_FAILED, str(error))
            return None
        snapshot.restore()
        self._telemetry.recordings += 1
        self._telemetry.recorded[recording_cause(self._last_recorded, key)] += 1
        self._telemetry.pool_bytes = pool.pool_bytes()
        self._graphs[key] = graph
        self._last_recorded = key
        return graph


def hyperparameter_key(value: object, device: torch.device) -> Hashable:
    """What a graphed update bakes of one ``param_groups`` entry, as a hashable key.

    A tensor on the update's device is read in place at every replay, so only its identity
    matters. Everything else is baked at capture and keyed by value: Python scalars, tuples of
    them (Adam's ``betas``, which OneCycleLR and CyclicLR rewrite), and tensors held on another
    device (a CPU tensor enters a CUDA kernel as a scalar argument). Other objects are keyed by
    type only.
    """
    if isinstance(value, Tensor):
        if value.device.type == device.type:
            return ("tensor", id(value))
        return ("value", value.dtype, tuple(value.detach().flatten().tolist()))
    if isinstance(value, (tuple, list)):
        return tuple(hyperparameter_key(v, device) for v in value)
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    return ("object", type(value).__qualname__)


class GraphedOptimizer:
    """An optimizer whose ``step()`` replays a recorded graph; drop-in for ``GradScaler.step``.

    Gradients change identity every step (``zero_grad(set_to_none=True)``), so the graph reads
    static gradient buffers: each replayed ``step()`` copies the live ``.grad`` into them, then
    launches; parameters and optimizer state are updated in place. Bitwise equal to native only
    when the native run uses the same optimizer code path (e.g. ``AdamW(capturable=True)`` on
    both sides: capturable Adam rounds differently from the default path). torch's SGD needs
    ``fused=True`` when its learning rate is a tensor: its other paths call ``.item()``.

    Args:
        optimizer: a :class:`torch.optim.Optimizer` or any
            :class:`~lucid_yolo.replay.protocols.UpdateOptimizer`.
        update: what one step runs; ``None`` calls ``optimizer.step()``. A caller can record
            more than the optimizer in the same graph, e.g. the update followed by an EMA blend.
        extra_state: the tensors ``update`` writes beyond the parameters and the optimizer
            state (EMA weights, counters), snapshotted around the capture like them.
        writes_gradients: ``update`` changes the gradients it reads (a gradient clip): each
            replay then copies the static gradients back to the live ones, so that the live
            gradients end a replayed step as a native step leaves them.
        warmup_steps: native steps before recording (they create the optimizer state).
        max_signatures: recordings kept (one per set of parameters with gradients and per set
            of Python-scalar hyperparameters).
        pool: shared memory pool; ``None`` makes a private one.
        enabled: ``False`` always steps natively.

    Attributes:
        applied: updates applied so far; ``GradScaler.step`` does not call :meth:`step` on a
            step it skips, so a caller can tell an applied update from a skipped one.

    Example:
        >>> lr = torch.tensor(1e-3, device="cuda")
        >>> graphed = GraphedOptimizer(torch.optim.AdamW(params, lr=lr, capturable=True))
        >>> scaler.step(graphed)  # doctest: +SKIP
    """

    def __init__(
        self,
        optimizer: UpdateOptimizer,
        *,
        update: Callable[[], object] | None = None,
        extra_state: Callable[[], Sequence[Tensor]] | None = None,
        writes_gradients: bool = False,
        warmup_steps: int = 1,
        max_signatures: int = 2,
        pool: ReplayPool | None = None,
        enabled: bool = True,
    ) -> None:
        self.optimizer = optimizer
        self._update = update
        self._extra_state = extra_state
        self._static_grads: dict[Hashable, list[Tensor]] = {}
        self._state_dict_seen: object = getattr(optimizer, "state", None)
        self._state_replacements = 0
        self.applied = 0
        self.recorder = UpdateRecorder(
            self._native_step,
            state=self._state_tensors,
            key=self._current_key,
            capture_body=self._capture_body,
            before_launch=self._copy_in,
            after_launch=self._copy_out if writes_gradients else None,
            name=f"optimizer {type(optimizer).__name__}",
            warmup_steps=warmup_steps,
            max_signatures=max_signatures,
            pool=pool,
            enabled=enabled,
        )

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The wrapped optimizer's parameter groups (GradScaler unscales through them)."""
        return self.optimizer.param_groups

    @property
    def telemetry(self) -> Telemetry:
        """Counters of the update recorder."""
        return self.recorder.telemetry

    def step(self) -> None:
        """Apply one update: native during warm-up, else copy-in and launch."""
        self.recorder()
        self.applied += 1

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of every parameter, as ``Optimizer.zero_grad``."""
        for p in self._params():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_().zero_()

    def state_dict(self) -> dict[str, Any]:
        """The wrapped optimizer's state dict."""
        return self.optimizer.state_dict()

    def _native_step(self) -> None:
        if self._update is not None:
            self._update()
            return
        # Looked up at each call: an LR scheduler wraps optimizer.step after construction.
        self.optimizer.step()

    def _params(self) -> list[Tensor]:
        return list(chain.from_iterable(map(_PARAMS, self.optimizer.param_groups)))

    def _with_grads(self) -> list[tuple[Tensor, Tensor]]:
        return [(p, p.grad) for p in self._params() if p.grad is not None]

    def _live_grads(self) -> list[Tensor]:
        return list(filter(IS_SET, map(GRAD, self._params())))

    def _current_key(self) -> UpdateKey:
        params = self._params()
        addresses = tuple(map(Tensor.data_ptr, params))
        grads = GradientLayouts.of(params)
        device = params[0].device if params else torch.device("cpu")
        hyper = tuple(
            tuple(
                (k, hyperparameter_key(v, device))
                for k, v in sorted(group.items())
                if k != "params"
            )
            for group in self.optimizer.param_groups
        )
        state = getattr(self.optimizer, "state", None)
        if state is not self._state_dict_seen:
            self._state_dict_seen = state
            self._state_replacements += 1
        return UpdateKey(addresses, grads, hyper, self._state_replacements)

    def _state_tensors(self) -> list[Tensor]:
        state = getattr(self.optimizer, "state", {})
        tensors = [v for s in state.values() for v in s.values() if isinstance(v, Tensor)]
        extra = [] if self._extra_state is None else list(self._extra_state())
        return [*self._params(), *tensors, *extra]

    def _capture_body(self, key: Hashable) -> Callable[[], object]:
        static = [TensorSpec.of(g).empty().copy_(g) for _, g in self._with_grads()]
        self._static_grads[key] = static

        def step_on_static_grads() -> None:
            # The graph bakes the addresses .grad points to at capture: point them at the
            # static buffers, step, and give the live gradients back.
            pairs = self._with_grads()
            for (p, _), buffer in zip(pairs, static, strict=True):
                p.grad = buffer
            try:
                self._native_step()
            finally:
                for p, live in pairs:
                    p.grad = live

        return step_on_static_grads

    def _copy_in(self, key: Hashable) -> None:
        with torch.no_grad():
            copy_grouped(self._static_grads[key], self._live_grads())

    def _copy_out(self, key: Hashable) -> None:
        live = self._live_grads()
        with torch.no_grad():
            copy_grouped(live, self._static_grads[key])


__all__ = [
    "GradientLayouts",
    "GraphedOptimizer",
    "UpdateKey",
    "UpdateRecorder",
    "hyperparameter_key",
]
