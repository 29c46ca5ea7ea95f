"""Level 1: record one region's forward and backward into graphs and replay them under autograd.

The recorder sits where the region's call was. On each call it decides, in this order: run native
(grad disabled, retired, warm-up, an unsafe interleaving), record (a new signature after
warm-up), or replay. A replay copies the inputs into static buffers, launches the forward graph
and returns the static outputs as ordinary tensors wired into autograd, so native code (a loss)
can follow; autograd later calls back into the recorder, which launches the backward graph and
hands gradients to ``AccumulateGrad`` exactly as eager autograd would (invariants 2-4
of docs/replay-invariants.md; the numbers below refer to that page), or, with
``direct_gradients``, writes the parameters' ``.grad`` itself by the same rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.graph import get_gradient_edge

from lucid_yolo.replay._autograd import (
    depends_on,
    gradient_patterns,
    reached_targets,
    route,
    swapped,
)
from lucid_yolo.replay._capture import autocast_cache_emulation, backward_without_autocast
from lucid_yolo.replay._copies import fresh_copy
from lucid_yolo.replay._grad_layout import GradLayouts, dense, same_layout
from lucid_yolo.replay._graphs import BackwardBody, RegionGraphs
from lucid_yolo.replay._outputs import OutputLayout
from lucid_yolo.replay._recycling import GradientRecycler
from lucid_yolo.replay._sharing import OutsideUseWatch, SharingProbe
from lucid_yolo.replay._signature_recorder import SignatureRecorder
from lucid_yolo.replay.exceptions import FreedActivationsError, ReplayConfigError
from lucid_yolo.replay.pool import OpenForward, ReplayPool
from lucid_yolo.replay.protocols import GroupedRegion, Region, RegionOutput
from lucid_yolo.replay.retire import RetireReason
from lucid_yolo.replay.signature import Signature, TensorSpec


@dataclass
class _Recording:
    """Everything one signature's graphs read and write, named by lifetime."""

    index: int
    graphs: RegionGraphs
    layout: OutputLayout
    static_inputs: tuple[Tensor, ...]
    read_in_place: tuple[int, ...]
    static_grad_outputs: dict[int, Tensor]
    differentiable: tuple[int, ...]
    grad_input_positions: tuple[int, ...]
    params: tuple[nn.Parameter, ...]
    groups: dict[str, tuple[int, ...]]
    reach: dict[int, frozenset[int]]
    positions: tuple[int, ...]
    """Where each of ``params`` stands among the region's parameters (the recycler's slots)."""
    frees_activations: bool
    """The backward graph frees the forward's activations (as captured, whatever the
    recorder's option says since): a replayed forward then holds the pool alone."""
    replays: int = 0


def _same(live: Tensor, recording: _Recording, position: int) -> bool:
    static = recording.static_inputs[position]
    return live.data_ptr() == static.data_ptr() and live.stride() == static.stride()


class _Call:
    """One replayed call, carried through autograd as the Function's non-tensor argument."""

    def __init__(self, recorder: RegionRecorder, recording: _Recording, inputs: list[Tensor]):
        self.recorder = recorder
        self.recording = recording
        self.inputs = inputs
        self.token: OpenForward | None = None
        self.direct = recorder.direct_gradients


class _ReplayFunction(torch.autograd.Function):
    """Forward launches the forward graph; backward launches the backward graph."""

    @staticmethod
    def forward(ctx: Any, call: _Call, *live_targets: Tensor) -> tuple[Tensor, ...]:
        return call.recorder._launch_forward(ctx, call)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, ...]:
        call: _Call = ctx.call
        # a direct call's first tensor argument is the recorder's anchor: it gets nothing
        anchor = (None,) if call.direct else ()
        return (None, *anchor, *call.recorder._launch_backward(ctx, call, grads))


class RegionRecorder(SignatureRecorder[_Recording]):
    """Records a region into CUDA graphs after warm-up and replays it, bitwise equal to eager.

    Args:
        region: what to record (:class:`~lucid_yolo.replay.protocols.Region`); a
            :class:`~lucid_yolo.replay.protocols.GroupedRegion` also names prediction groups.
        name: quoted in warnings and retirements.
        warmup_steps: native calls per signature before it is recorded; they are real steps.
            Calls held back by ``defer_recording`` (an attribute) count as native calls too.
        capture_warmup: forward+backward passes on the side stream right before capture, so
            every kernel and shape is seen before capture (invariant 16); their effect on buffers
            and RNG is undone.
        max_signatures: recordings kept; a further signature runs native (graph memory is held
            for good, invariant 19).
        pool: memory pool and side stream, shareable with other recorders of the same step;
            ``None`` gives the recorder its own (CPU stand-in when CUDA is not available).
        clone_outputs: return copies instead of the static outputs. Static outputs are borrowed:
            they are overwritten by the next replay of this recording, and — when the pool is
            shared — by graphs that replay during the same backward.
        enabled: ``False`` runs every call native (bookkeeping only counts it).
        direct_gradients: the replayed backward writes the parameters' ``.grad`` itself (a
            private copy of the gradient where ``.grad`` is ``None``, an in-place add where it
            is not, as ``AccumulateGrad`` does) instead of handing autograd one gradient per
            parameter: the same bits, without autograd's per-parameter work on the host, which
            at small batch sets the pace of a replayed step. The parameters then have no edge
            in the replayed graph, so only for a caller that owns the backward:
            ``backward()`` without ``inputs=``, no ``torch.autograd.grad`` with respect to the
            region's parameters, and nothing hooked on their gradient accumulators
            (``DistributedDataParallel`` is: leave it off there). Read at each call, so it may
            change between steps.
        frees_activations: the recording's backward frees the forward's saved activations as
            it goes, as a native backward does (the last gradient pattern's, when there are
            several), so its own scratch and the graphs captured after it in the pool (the
            update's) reuse that memory instead of reserving their own beside it. In exchange,
            while a replayed forward awaits its backward nothing else in the pool replays,
            records, warms up or borrows (it runs native): each would write those activations.
            So only for a region that nothing runs inside of between its forward and its
            backward (no chained region after it, no update or evaluation in between).

    Raises:
        ReplayConfigError: for a non-positive ``max_signatures`` or ``capture_warmup``, or a
            negative ``warmup_steps``.

    Example:
        >>> recorder = RegionRecorder(ModuleRegion(net))  # doctest: +SKIP
        >>> loss = criterion(recorder(images), targets)  # doctest: +SKIP
        >>> loss.backward()  # doctest: +SKIP
    """

    def __init__(
        self,
        region: Region,
        *,
        name: str = "region",
        warmup_steps: int = 1,
        capture_warmup: int = 2,
        max_signatures: int = 4,
        pool: ReplayPool | None = None,
        clone_outputs: bool = False,
        enabled: bool = True,
        direct_gradients: bool = False,
        frees_activations: bool = False,
    ) -> None:
        super().__init__(
            region,
            name=name,
            warmup_steps=warmup_steps,
            capture_warmup=capture_warmup,
            max_signatures=max_signatures,
            pool=pool,
            clone_outputs=clone_outputs,
            enabled=enabled,
        )
        self.groups = region.prediction_groups() if isinstance(region, GroupedRegion) else {}
        self.direct_gradients = direct_gradients
        self.frees_activations = frees_activations
        self._sharing = SharingProbe(self.retire)
        self._outside = OutsideUseWatch(self.retire)
        self._recycler = GradientRecycler(len(self.binding.parameters))
        self._grad_layouts = GradLayouts()
        self._anchor: Tensor | None = None
        self._anchor_node: Any = None

    # ------------------------------------------------------------------ dispatch

    def __call__(self, *args: Any) -> RegionOutput:
        """Run the region: native, record then replay, or replay (see the class docstring)."""
        if not self.enabled:
            return self._native("disabled", args)
        busy = self.pool.busy()
        if busy is not None:
            return self._native(busy, args)
        if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
            return self._native("no-grad", args)
        if self.retired is not None:
            return self._native("retired", args)
        return self._dispatch(args)

    def _replay_call(self, recording: _Recording, args: Sequence[Any]) -> RegionOutput:
        """Replay, unless an input read in place moved or the forward would interleave."""
        tensors = [a for a in args if isinstance(a, Tensor)]
        moved = [i for i in recording.read_in_place if not _same(tensors[i], recording, i)]
        if moved:
            self.fall_back(
                RetireReason.INPUTS_CHANGED,
                f"tensor inputs {moved!r} were recorded as an earlier region's static outputs, "
                "read in place, and this call passed other tensors (the earlier region ran "
                "native, or its outputs were replaced); this call runs native",
            )
            return self.region(*args)
        if not self._may_open(recording, tensors):
            self.fall_back(
                RetireReason.INTERLEAVED,
                "a forward came before the backward of an earlier replayed one; run each "
                "forward's backward before the next forward, or chain the regions",
            )
            return self.region(*args)
        return self._replay(recording, tensors)

    def retire(self, reason: RetireReason, detail: str) -> None:
        """Stop replaying for good (:meth:`SignatureRecorder.retire`), and let the gradients
        kept for reuse go: later backwards are native and keep nothing."""
        super().retire(reason, detail)
        self._recycler.stop()
        self._outside.stop()

    def reset(self) -> None:
        """Forget every recording (its graph memory is freed once no output references it)."""
        self._recordings.clear()
        self._last_recorded = None
        self._seen.clear()
        self._native_signatures.clear()

    def static_input(self, position: int, spec: TensorSpec) -> Tensor | None:
        """The newest recording's static buffer for tensor input ``position``, if it is ``spec``.

        A caller that builds an input anyway (a dtype conversion of the batch) can build it
        straight into this buffer and pass the buffer: the replay's copy-in then skips it, and
        the step holds one copy of that input instead of two (issue 11, memory).

        Returns ``None`` when a call would not replay (disabled, retired), before the first
        recording, when the buffer's shape, strides, dtype, device or ``requires_grad`` differ
        from ``spec``, and while any forward of the pool awaits its backward: that backward's
        graph may still read the buffer (a convolution's weight gradient reads its input).
        """
        if not self.enabled or self.retired is not None or self._last_recorded is None:
            return None
        if self.pool.open_forwards():
            return None
        recording = self._recordings[self._last_recorded]
        static_inputs = recording.static_inputs
        if not 0 <= position < len(static_inputs) or position in recording.read_in_place:
            return None
        static = static_inputs[position]
        return static if TensorSpec.of(static) == spec else None

    def _warm_up(self, signature: Signature, args: Sequence[Any]) -> RegionOutput:
        """A native call that also learns the layout of the gradients its outputs receive."""
        output = self._native("warm-up", args)
        try:
            flat = OutputLayout.flatten(output)[1]
        except ReplayConfigError:
            return output  # recording will fail and say why
        self._grad_layouts.watch(signature, flat)
        return output

    def _may_open(self, recording: _Recording, inputs: Sequence[Tensor]) -> bool:
        """A forward may replay when nothing is open, or nested above the newest open one."""
        open_forwards = self.pool.open_forwards()
        if not open_forwards:
            return True
        newest = open_forwards[-1]
        return recording.index > newest.index and depends_on(inputs, newest.node_id)

    # ------------------------------------------------------------------ recording

    def _record(self, signature: Signature, args: Sequence[Any]) -> _Recording:
        """Warm up on the side stream, then capture forward and backward.

        Static inputs are fresh buffers with each input's exact shape, stride and dtype, filled
        with the current inputs so warm-up sees real values; an input that is an earlier region's
        static output is that buffer itself (issue 11, memory). Static gradient outputs take the
        strides of the gradients the native warm-up calls received (:mod:`._grad_layout`).
        """
        # Memory order: release what native steps left cached on the default stream before the
        # static buffers and the warm-up take theirs, and release what a warm-up outside the
        # pool left on the side stream before the capture fills the pool
        # (ReplayPool.release_cached_blocks).
        self.pool.release_cached_blocks()
        live_inputs = [a for a in args if isinstance(a, Tensor)]
        # An input that is an earlier region's static output (the network's outputs for the
        # loss) is read in place: only that region's forward graph writes it, before this
        # region's forward on every step, and a call passing another tensor runs native.
        read_in_place = tuple(
            i for i, a in enumerate(live_inputs) if self.pool.static_output_of(a) is not None
        )
        with torch.no_grad():
            static_inputs = tuple(
                a.detach() if i in read_in_place else fresh_copy(a)
                for i, a in enumerate(live_inputs)
            )
        for static, live in zip(static_inputs, live_inputs, strict=True):
            static.requires_grad_(live.requires_grad)
        static_iter = iter(static_inputs)
        call_args = [next(static_iter) if isinstance(a, Tensor) else a for a in args]
        grad_input_positions = tuple(i for i, s in enumerate(static_inputs) if s.requires_grad)
        positions = tuple(i for i, p in enumerate(self.binding.parameters) if p.requires_grad)
        params = tuple(self.binding.parameters[i] for i in positions)
        # Record against leaf aliases of the parameters (same storage, fresh autograd nodes):
        # the parameters' own AccumulateGrad nodes may be alive from a native step on the
        # default stream, and reusing them from the side stream breaks the capture.
        aliases = {id(p): nn.Parameter(p.detach(), requires_grad=True) for p in params}
        targets = (*(static_inputs[i] for i in grad_input_positions), *aliases.values())
        layout_slot: list[OutputLayout] = []
        device_type = self.pool.device.type

        def forward() -> tuple[Tensor, ...]:
            with swapped(self.binding.submodules, aliases), autocast_cache_emulation(device_type):
                layout, flat = OutputLayout.flatten(self.region(*call_args))
            layout_slot[:] = [layout]
            return flat

        # Once the pool holds graphs (a later region, such as the loss after the network), the
        # warm-up allocates from their free scratch instead of beside the pool, and the capture
        # reuses its blocks (ReplayPool.warm_up). Only after a native call of this signature:
        # what the region creates on first use then exists outside the pool already.
        with self.pool.warm_up(into_pool=self._ran_natively(signature)):
            with self.pool.side_stream():
                outputs = forward()
            groups = layout_slot[0].group_indices(self.groups)
            differentiable = tuple(i for i, o in enumerate(outputs) if o.requires_grad)
            patterns = gradient_patterns(groups, differentiable) if targets else {}
            # The static gradient outputs live as long as the recording: allocated on the caller's
            # stream (from the outputs' shapes only), they pin no side-stream segment that the
            # release before capture would otherwise hand back. Entering the side stream again
            # orders the warm-up after their zero fill.
            with torch.no_grad():
                static_grad_outputs = {
                    i: self._grad_layouts.static_buffer(signature, i, outputs[i])
                    for i in differentiable
                }
            # With frees_activations each pass's last backward frees the activations as it goes
            # (a native backward's memory), and the next pass runs its forward afresh.
            frees = self.frees_activations
            last = len(patterns) - 1
            with self.pool.side_stream():
                with backward_without_autocast(device_type):
                    reach = reached_targets(
                        outputs, differentiable, targets, static_grad_outputs, keep_graph=not frees
                    )
                # Warm-up visits every kernel and shape of the forward and of each backward pattern;
                # the forwards run under the caller's autocast, the backwards without (as natively).
                for iteration in range(self.capture_warmup):
                    if iteration or frees:
                        # One pass's activations at a time: the previous pass is freed before the
                        # next forward allocates, or the warm-up would hold two steps' activations.
                        del outputs
                        outputs = forward()
                    for n, indices in enumerate(patterns.values()):
                        with backward_without_autocast(device_type):
                            torch.autograd.grad(
                                [outputs[i] for i in indices],
                                targets,
                                [static_grad_outputs[i] for i in indices],
                                allow_unused=True,
                                retain_graph=not (frees and n == last),
                            )
                del outputs

        def backward_of(indices: tuple[int, ...], retain: bool) -> BackwardBody:
            def backward(outs: Sequence[Tensor]) -> tuple[Tensor | None, ...]:
                with backward_without_autocast(device_type):
                    grads = torch.autograd.grad(
                        [outs[i] for i in indices],
                        targets,
                        [static_grad_outputs[i] for i in indices],
                        allow_unused=True,
                        retain_graph=retain,
                    )
                return tuple(grads)

            return backward

        self.pool.release_cached_blocks()
        graphs = RegionGraphs(self.pool)
        backwards = {
            p: backward_of(ix, retain=not (frees and n == last))
            for n, (p, ix) in enumerate(patterns.items())
        }
        graphs.capture(forward, backwards, params)
        return _Recording(
            index=self.pool.next_index(),
            graphs=graphs,
            layout=layout_slot[0],
            static_inputs=static_inputs,
            read_in_place=read_in_place,
            static_grad_outputs=static_grad_outputs,
            differentiable=differentiable,
            grad_input_positions=grad_input_positions,
            params=params,
            groups=groups,
            reach=reach,
            positions=positions,
            frees_activations=frees,
        )

    # ------------------------------------------------------------------ replay

    def _replay(self, recording: _Recording, inputs: list[Tensor]) -> RegionOutput:
        call = _Call(self, recording, inputs)
        live_targets = [inputs[i] for i in recording.grad_input_positions]
        if not call.direct:
            outputs = _ReplayFunction.apply(call, *live_targets, *recording.params)
            return recording.layout.rebuild(outputs)
        self._outside.watch(recording.params)
        outputs = _ReplayFunction.apply(call, self._anchor_tensor(), *live_targets)
        return recording.layout.rebuild(outputs)

    def _anchor_tensor(self) -> Tensor:
        """A leaf that requires grad, the first tensor argument of a direct replay: it makes
        the outputs require grad when no input does (the network's images), at the cost of one
        autograd node instead of one a parameter."""
        if self._anchor is None:
            self._anchor = torch.zeros((), device=self.pool.device, requires_grad=True)
            self._anchor_node = get_gradient_edge(self._anchor).node
        return self._anchor

    def _launch_forward(self, ctx: Any, call: _Call) -> tuple[Tensor, ...]:
        recording = call.recording
        # Copy-in: the graph reads only the static inputs (invariant 7); skip a caller that
        # already wrote into them.
        for static, live in zip(recording.static_inputs, call.inputs, strict=True):
            if static.data_ptr() != live.data_ptr():
                static.copy_(live)
        call.inputs = [call.inputs[i] for i in recording.grad_input_positions]
        recording.graphs.launch_forward()
        recording.replays += 1
        self._telemetry.replays += 1
        self._telemetry.graph_launches += 1
        outputs = tuple(
            o.clone() if self.clone_outputs else o.detach() for o in recording.graphs.static_outputs
        )
        constant = [o for i, o in enumerate(outputs) if i not in recording.differentiable]
        if constant:
            ctx.mark_non_differentiable(*constant)
        ctx.set_materialize_grads(False)
        ctx.call = call
        if recording.differentiable:
            call.token = OpenForward(
                recording.index, id(ctx), exclusive=recording.frees_activations
            )
            ctx.token = call.token
            self.pool.push(call.token)
        return outputs

    def _check_grad_layout(
        self, recording: _Recording, index: int, grad: Tensor, static: Tensor
    ) -> None:
        """Retire when a dense incoming gradient is laid out unlike the buffer the backward graph
        was recorded over (an expanded gradient has no layout to match: copied as before)."""
        if self.retired is None and dense(grad) and not same_layout(grad, static):
            self.retire(
                RetireReason.GRAD_LAYOUT,
                f"the gradient of output {recording.layout.keys[index]!r} came with strides "
                f"{tuple(grad.stride())}, the backward graph reads strides "
                f"{tuple(static.stride())}: this backward may round differently from native "
                "and later calls run native; keep the code after the region producing the same "
                "gradient layout on every step",
            )

    def _check_backward_autocast(self) -> None:
        """Retire when this backward was started under autocast: autograd would run the native
        backward under it, the recorded one runs without (:func:`backward_without_autocast`)."""
        device_type = self.pool.device.type
        if self.retired is None and torch.is_autocast_enabled(device_type):
            dtype = torch.get_autocast_dtype(device_type)
            self.retire(
                RetireReason.BACKWARD_AUTOCAST,
                f"backward() ran under {device_type} autocast ({dtype}); the backward graph was "
                "recorded without autocast, so this backward may round differently and later "
                "calls run native; call backward() after leaving the autocast region",
            )

    def _launch_backward(
        self, ctx: Any, call: _Call, grads: Sequence[Tensor | None]
    ) -> tuple[Tensor | None, ...]:
        recording = call.recording
        if recording.frees_activations and call.token is not None and call.token.closed:
            raise FreedActivationsError(
                f"{self.name}: a second backward through one replayed forward; its recording "
                "frees the forward's activations in its backward (frees_activations=True), so "
                "they are gone: run one backward per forward, or record without "
                "frees_activations"
            )
        self._check_backward_autocast()
        graded = frozenset(
            name
            for name, indices in recording.groups.items()
            if any(grads[i] is not None for i in indices)
        )
        for name in recording.groups.keys() - graded:
            self._telemetry.ungraded[name] += 1
        live = (*call.inputs, *recording.params)
        if not graded:
            # No output got a gradient (a chained region's outputs all unused): autograd would
            # hand its targets nothing, and no pattern graph exists for the empty set.
            if call.token is not None:
                call.token.closed = True
            return tuple(None for _ in (call.inputs if call.direct else live))
        # Copy-in of the incoming gradients; an output without one reads zeros, as autograd's
        # materialised gradient would be.
        with torch.no_grad():
            for i, static in recording.static_grad_outputs.items():
                grad = grads[i]
                if grad is None:
                    static.zero_()
                else:
                    self._check_grad_layout(recording, i, grad, static)
                    static.copy_(grad)
        recording.graphs.launch_backward(graded)
        self._telemetry.graph_launches += 1
        if call.token is not None:
            call.token.closed = True
        # Other open forwards' backward graphs will run before AccumulateGrad reads our static
        # buffers and may reuse their memory: hand private copies then.
        private = bool(self.pool.open_forwards())
        # A group used in part: a target that only its unused outputs reach keeps .grad as
        # autograd leaves it (None), not the zeros the pattern's graph computed for it.
        reached = frozenset[int]().union(
            *(recording.reach[i] for i in recording.differentiable if grads[i] is not None)
        )
        statics = [
            g if k in reached else None for k, g in enumerate(recording.graphs.static_grads[graded])
        ]
        if call.direct:
            return self._write_gradients(ctx, call, statics, private)
        spares = (*(None for _ in call.inputs), *self._recycler.take(recording.positions))
        with torch.no_grad():
            routed = route(live, statics, private, spares)
        self._sharing.arm(ctx.next_functions, routed, recording.params)
        self._recycler.keep_after_backward(
            recording.positions, recording.params, routed[len(call.inputs) :]
        )
        return routed

    def _write_gradients(
        self, ctx: Any, call: _Call, statics: Sequence[Tensor | None], private: bool
    ) -> tuple[Tensor | None, ...]:
        """The ``direct_gradients`` hand-off: the parameters' ``.grad`` written here, the
        inputs' gradients handed to autograd as :func:`route` hands them.

        What ``AccumulateGrad`` would do to each parameter: nothing when it no longer requires
        grad, or when this pass does not accumulate into parameters at all
        (``torch.autograd.grad``, ``backward(inputs=...)``: the anchor's node is then not to
        run); a private tensor where ``.grad`` is ``None`` (a spare of the recycler or a clone
        of the static, invariants 2-3); the static added to ``.grad`` otherwise (invariant 4).
        All read the static buffers before any other graph of the pool runs. A parameter that
        also gets gradient from elsewhere in this backward retires the recorder
        (:class:`OutsideUseWatch`, invariant 5).
        """
        recording = call.recording
        inputs = len(call.inputs)
        firsts: list[nn.Parameter] = []
        positions: list[int] = []
        sources: list[Tensor] = []
        laters: list[nn.Parameter] = []
        later_positions: list[int] = []
        added: list[Tensor] = []
        if torch._C._will_engine_execute_node(self._anchor_node):
            parameters = zip(recording.params, recording.positions, statics[inputs:], strict=True)
            for param, position, static in parameters:
                if static is None or not param.requires_grad:
                    continue
                if param.grad is None:
                    firsts.append(param)
                    positions.append(position)
                    sources.append(static)
                else:
                    laters.append(param)
                    later_positions.append(position)
                    added.append(static)
        spares = self._recycler.take(positions)
        with torch.no_grad():
            # one call, so one grouped copy: a parameter without .grad gets a private tensor
            # whatever ``private`` says
            routed = route(
                [*call.inputs, *firsts],
                [*statics[:inputs], *sources],
                private,
                [*(None for _ in call.inputs), *spares],
            )
        _accumulate(laters, added)
        handed = routed[inputs:]
        for param, grad in zip(firsts, handed, strict=True):
            param.grad = grad
        self._recycler.keep_now(
            [*positions, *later_positions], [*firsts, *laters], [*handed, *(None for _ in laters)]
        )
        if firsts or laters:
            self._outside.written([*firsts, *laters])
            self._outside.check_at_end()
        self._sharing.arm(ctx.next_functions[1:], routed[:inputs], ())
        return routed[:inputs]


def _accumulate(params: Sequence[nn.Parameter], statics: list[Tensor]) -> None:
    """``AccumulateGrad`` on a later micro-batch: ``.grad`` plus the static, in place, one
    grouped add for all; under ``backward(create_graph=True)`` (grad mode on) a new tensor
    each, which is what ``AccumulateGrad`` then makes."""
    grads: list[Tensor] = [p.grad for p in params]  # type: ignore[misc]
    if torch.is_grad_enabled():
        for param, grad, static in zip(params, grads, statics, strict=True):
            param.grad = grad + static
    elif grads:
        torch._foreach_add_(grads, statics)


__all__ = ["RegionRecorder"]
