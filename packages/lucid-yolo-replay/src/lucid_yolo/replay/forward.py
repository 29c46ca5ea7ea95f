"""Level 1 without autograd: record a region's forward for evaluation or inference and replay it.

An evaluation pass runs the same network over batches of one shape with gradients off. Eagerly,
the host launches every kernel of every layer one by one, and at evaluation batch sizes the GPU
waits on it (issue 11: 41 ms per batch of 16 whatever the batch, for a forward that the training
step replays in 11 ms). A forward-only recording is one graph per signature, no backward, no
autograd node: a replay copies the tensor inputs into static buffers, launches the graph and
hands back its static outputs.

Outputs are borrowed, as the region recorder's are: the next launch of this recording rewrites
them, and when the pool is shared, so may any graph of the pool captured before this one. A
caller that keeps an output across calls clones it (or asks for ``clone_outputs``).

Sharing a training step's pool follows the pool's rule for scratch (:class:`ReplayPool`) when
the caller keeps to one condition: it reads this graph's outputs only between its launch and the
end of that evaluation call, and feeds them to no graph of the pool. This graph then never
launches while a training forward awaits its backward or while the pool's free blocks are lent
(both run native here), and graphs captured after it may take its scratch for their own live
buffers, which a training step fills before it reads them, every step
(docs/replay-invariants.md, invariant 28).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lucid_yolo.replay._capture import autocast_cache_emulation
from lucid_yolo.replay._copies import fresh_copy
from lucid_yolo.replay._graphs import ForwardGraph
from lucid_yolo.replay._outputs import OutputLayout
from lucid_yolo.replay._signature_recorder import SignatureRecorder
from lucid_yolo.replay.pool import ReplayPool
from lucid_yolo.replay.protocols import Region, RegionOutput
from lucid_yolo.replay.retire import RetireReason
from lucid_yolo.replay.signature import Signature


@dataclass
class _ForwardRecording:
    graph: ForwardGraph
    layout: OutputLayout
    static_inputs: tuple[Tensor, ...]


class ForwardRecorder(SignatureRecorder[_ForwardRecording]):
    """Records a region's forward without autograd into one CUDA graph per signature and replays
    it, bitwise equal to the eager forward (the same kernels on the same inputs).

    A call replays only with gradients off (``torch.no_grad`` or ``torch.inference_mode``): with
    them on, autograd needs the region recorder, and the call runs native (``grad-enabled``).
    The same :class:`~lucid_yolo.replay.signature.Signature` keys a recording as for the region
    recorder (inputs, autocast, training flags, scalars, backend flags), and the same
    :class:`~lucid_yolo.replay.signature.Binding` retires it when a parameter, forward or hook
    changes.

    Args:
        region: what to record; its output is a tensor, a sequence or a ``str``-keyed mapping of
            tensors.
        name: quoted in warnings and retirements.
        warmup_steps: native calls per signature before it is recorded. With one or more, a
            recording made while graphs hold the pool warms up in its free scratch (nothing it
            makes may outlive it: :class:`~lucid_yolo.replay.PoolLeakError`). ``0`` records on
            the first call, with no eager call first, and warms up beside the pool; calls held
            back by ``defer_recording`` (an attribute) count as native calls before it.
        capture_warmup: eager forwards on the side stream right before the capture, so every
            kernel and algorithm is chosen before it (invariant 16); buffers and RNG they move
            are restored.
        max_signatures: recordings kept; a further signature runs native.
        pool: memory pool and side stream, shareable with a training step's recorders (see
            the module docstring); ``None`` gives the recorder its own.
        clone_outputs: return copies instead of the borrowed static outputs.
        enabled: ``False`` runs every call native.

    Raises:
        ReplayConfigError: a negative ``warmup_steps``, or ``capture_warmup`` or
            ``max_signatures`` below 1.

    Example:
        >>> evaluate = ForwardRecorder(ModuleRegion(model.eval()))  # doctest: +SKIP
        >>> with torch.inference_mode():  # doctest: +SKIP
        ...     logits = evaluate(images).clone()
    """

    def __init__(
        self,
        region: Region,
        *,
        name: str = "forward",
        warmup_steps: int = 1,
        capture_warmup: int = 1,
        max_signatures: int = 2,
        pool: ReplayPool | None = None,
        clone_outputs: bool = False,
        enabled: bool = True,
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

    def __call__(self, *args: Any) -> RegionOutput:
        """Run the region: native, record then replay, or replay (see the class docstring)."""
        if not self.enabled:
            return self._native("disabled", args)
        if torch.is_grad_enabled():
            return self._native("grad-enabled", args)
        busy = self.pool.busy()
        if busy is not None:
            return self._native(busy, args)
        if self.retired is not None:
            return self._native("retired", args)
        if self.pool.open_forwards():
            self.fall_back(
                RetireReason.INTERLEAVED,
                "a forward without gradients came while a replayed training forward of the same "
                "pool awaited its backward; this call runs native",
            )
            return self.region(*args)
        return self._dispatch(args)

    def _record(self, signature: Signature, args: Sequence[Any]) -> _ForwardRecording:
        """Warm up on the side stream, then capture the forward.

        As the region recorder's (invariant 25), the warm-up allocates from the pool's free
        scratch when graphs hold the pool and a native call of this signature came first
        (:meth:`ReplayPool.warm_up`: nothing it makes may outlive it); otherwise beside the pool,
        released before the capture (:meth:`ReplayPool.release_cached_blocks`). The autocast
        cache is emptied around each forward, as the region recorder does (invariant 6): a cast
        cached by an eager call before would otherwise be read from its old memory.
        """
        self.pool.release_cached_blocks()
        static_inputs = tuple(fresh_copy(a) for a in args if isinstance(a, Tensor))
        static_iter = iter(static_inputs)
        call_args = [next(static_iter) if isinstance(a, Tensor) else a for a in args]
        layout_slot: list[OutputLayout] = []

        device_type = self.pool.device.type

        def forward() -> tuple[Tensor, ...]:
            # outside inference mode whatever the caller's: the static outputs are then ordinary
            # tensors, which a later call under no_grad may hand to code that writes them
            with (
                torch.inference_mode(False),
                torch.no_grad(),
                autocast_cache_emulation(device_type),
            ):
                layout, flat = OutputLayout.flatten(self.region(*call_args))
            layout_slot[:] = [layout]
            return flat

        with self.pool.warm_up(into_pool=self._ran_natively(signature)), self.pool.side_stream():
            for _ in range(self.capture_warmup):
                forward()
        self.pool.release_cached_blocks()
        graph = ForwardGraph(self.pool)
        graph.capture(forward)
        return _ForwardRecording(graph, layout_slot[0], static_inputs)

    def _replay_call(self, recording: _ForwardRecording, args: Sequence[Any]) -> RegionOutput:
        inputs = [a for a in args if isinstance(a, Tensor)]
        for static, live in zip(recording.static_inputs, inputs, strict=True):
            if static.data_ptr() != live.data_ptr():
                static.copy_(live)
        recording.graph.launch()
        self._telemetry.replays += 1
        self._telemetry.graph_launches += 1
        outputs = recording.graph.static_outputs
        if self.clone_outputs:
            outputs = tuple(o.clone() for o in outputs)
        return recording.layout.rebuild(outputs)


__all__ = ["ForwardRecorder"]
