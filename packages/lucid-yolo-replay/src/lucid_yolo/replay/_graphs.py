"""Graph backends: real CUDA graphs, or a CPU stand-in with the same buffer lifetimes.

Both backends expose the same life cycle — capture forward, capture backward, launch forward,
launch backward — over the same static buffers, so every line of the recorder's bookkeeping runs
in the CPU suite. The stand-in re-executes the captured callables eagerly and copies their results
into the static buffers, exactly where a CUDA graph would have written them.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from torch import Tensor

from lucid_yolo.replay._capture import capture_with_trail
from lucid_yolo.replay._copies import copy_grouped
from lucid_yolo.replay.pool import ReplayPool, drop_cublas_workspaces

_T = TypeVar("_T")
_G = TypeVar("_G")

ForwardBody = Callable[[], tuple[Tensor, ...]]
"""Runs the region on its static inputs; returns flat outputs (autograd-connected)."""
BackwardBody = Callable[[Sequence[Tensor]], tuple[Tensor | None, ...]]
"""Maps autograd-connected outputs to gradients of the targets, reading static grad outputs."""


Pattern = frozenset[str]
"""The prediction groups that receive gradient in one backward."""


class RegionGraphs:
    """Forward graph and one backward graph per gradient pattern, or their CPU stand-in.

    Attributes:
        static_outputs: flat outputs; a forward launch rewrites them in place.
        static_grads: per pattern, the gradient of every target (``None`` where that pattern
            does not reach it); a backward launch rewrites them in place.
        parameter_grads: one gradient buffer per parameter target, shared by every pattern
            (``static_grads[p]`` holds them in the parameters' places): one backward runs per
            replayed forward, so a set per pattern would only hold the same bytes several times.
    """

    def __init__(self, pool: ReplayPool) -> None:
        self.pool = pool
        self.static_outputs: tuple[Tensor, ...] = ()
        self.static_grads: dict[Pattern, tuple[Tensor | None, ...]] = {}
        self.parameter_grads: tuple[Tensor, ...] = ()
        self._capture_outputs: tuple[Tensor, ...] = ()
        self._live_outputs: tuple[Tensor, ...] = ()
        self._forward_body: ForwardBody | None = None
        self._backward_bodies: dict[Pattern, BackwardBody] = {}
        self._forward_graph: torch.cuda.CUDAGraph | None = None
        self._backward_graphs: dict[Pattern, torch.cuda.CUDAGraph] = {}

    def capture(
        self,
        forward: ForwardBody,
        backwards: dict[Pattern, BackwardBody],
        parameters: Sequence[Tensor] = (),
    ) -> None:
        """Record ``forward``, then each pattern's backward (on CUDA into the shared pool).

        The capture-time outputs stay referenced and the backward bodies keep the autograd
        graph (``retain_graph=True``), so the activations the backward graphs read keep their
        pool memory: a later capture in the same pool can never reuse it, which is what lets
        chained regions (forward 1, forward 2, backward 2, backward 1) share a pool. A recorder
        with ``frees_activations`` makes its last body free them instead (the pool then keeps
        every other graph from running while its forward is open:
        :meth:`ReplayPool.exclusive_open`). Once captured, the graphs hold the pool
        (:meth:`ReplayPool.hold`) while this object lives.

        Args:
            forward: the region over its static inputs.
            backwards: per pattern, the gradients of every target.
            parameters: the trailing targets that are parameters. Each backward graph copies
                their gradients into :attr:`parameter_grads` (allocated here, outside the pool),
                so the gradients autograd returned during a capture are scratch that later
                captures reuse, instead of one live set per pattern.

        Raises:
            CaptureError: naming the operator that broke the capture when it is known.
        """
        with torch.no_grad():
            self.parameter_grads = tuple(torch.empty_like(p) for p in parameters)
        bodies = {p: _into_shared(self.parameter_grads, b) for p, b in backwards.items()}
        if self.pool.uses_cuda:
            graph = torch.cuda.CUDAGraph()
            outputs = capture_with_trail(lambda: self._cuda_capture(graph, forward), False)
            self._forward_graph = graph
            self._capture_outputs = outputs
            self.static_outputs = tuple(o.detach() for o in outputs)
            for pattern, body in bodies.items():
                self._backward_graphs[pattern] = torch.cuda.CUDAGraph()
                self.static_grads[pattern] = capture_with_trail(
                    _bind(self._cuda_capture, self._backward_graphs[pattern], body, outputs),
                    False,
                )
            self.pool.hold(self)
            self.pool.register_static_outputs(self.static_outputs)
            return
        outputs = capture_with_trail(forward, True)
        for pattern, body in bodies.items():
            grads = capture_with_trail(_bind(_call, None, body, outputs), True)
            first = len(grads) - len(parameters)
            self.static_grads[pattern] = (
                *(None if g is None else g.clone() for g in grads[:first]),
                *grads[first:],
            )
        self._forward_body, self._backward_bodies = forward, bodies
        self.static_outputs = tuple(o.detach().clone() for o in outputs)
        self.pool.hold(self)
        self.pool.register_static_outputs(self.static_outputs)

    def _cuda_capture(self, graph: torch.cuda.CUDAGraph, body: Callable[[], _T]) -> _T:
        return cuda_capture(graph, self.pool, body)

    def launch_forward(self) -> None:
        """Recompute ``static_outputs`` from the static inputs."""
        if self._forward_graph is not None:
            self._forward_graph.replay()
            return
        assert self._forward_body is not None
        with torch.enable_grad():
            outputs = self._forward_body()
        with torch.no_grad():
            for static, live in zip(self.static_outputs, outputs, strict=True):
                static.copy_(live)
        self._live_outputs = outputs

    def launch_backward(self, pattern: Pattern) -> None:
        """Recompute ``static_grads[pattern]`` from the static grad outputs."""
        if self._forward_graph is not None:
            self._backward_graphs[pattern].replay()
            return
        grads = self._backward_bodies[pattern](self._live_outputs)
        self._live_outputs = ()
        with torch.no_grad():
            for static, live in zip(self.static_grads[pattern], grads, strict=True):
                if static is not None and live is not None and static is not live:
                    static.copy_(live)


def cuda_capture(graph: torch.cuda.CUDAGraph, pool: ReplayPool, body: Callable[[], _T]) -> _T:
    """Capture ``body`` into ``graph`` on the pool's side stream; clean up if it fails.

    Python's cycle collector is paused meanwhile: collecting an old recorder's graph or tensors
    would free device memory inside the capture, which invalidates it.

    torch keeps a cuBLAS workspace per handle and stream for good (torch 2.11: 32 MiB each with
    ``CUBLAS_WORKSPACE_CONFIG=:4096:8``), and a graph bakes in the one its matrix products used.
    Cleared before the capture, the graph's workspaces are allocated inside it, in the pool;
    cleared after, those blocks are pool scratch like the graph's other temporaries, which later
    captures may reuse, instead of live blocks beside the pool that the side stream keeps for the
    whole run (two, one per thread, 0.063 GiB in the session-6 fits). The same rule as for any
    scratch keeps this safe: a later capture's live memory is only used while no earlier graph
    runs (:class:`ReplayPool`). Where torch allocates workspaces per call, clearing is a no-op;
    where its map is per thread, only this thread's are cleared.

    A failed capture puts the caller back on its own stream and device. In some torch versions
    ``torch.cuda.graph`` restores them only after ``capture_end`` returns, and ``capture_end``
    raises when the body broke the capture (a host synchronisation): the thread would stay on
    the pool's side stream, so that whatever it later allocated on "its" stream inside a
    warm-up or a loan of any pool whose side stream is that one (torch hands streams out
    round-robin from a small per-device set) would be routed into that pool. An outer stream
    context restores them on every exit.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        drop_cublas_workspaces()
        with pool.capturing():
            # thread_local: the DataLoader's pin-memory thread may call cudaHostAlloc meanwhile.
            with (
                torch.cuda.stream(pool.stream),
                torch.cuda.graph(
                    graph, pool=pool.handle, stream=pool.stream, capture_error_mode="thread_local"
                ),
            ):
                result = body()
            drop_cublas_workspaces()
    except BaseException:
        # Best effort: free what the broken capture holds; the caller reports the original error.
        with contextlib.suppress(RuntimeError):
            graph.reset()
        raise
    finally:
        if collecting:
            gc.enable()
    return result


def _into_shared(buffers: Sequence[Tensor], backward: BackwardBody) -> BackwardBody:
    """``backward``, handing the trailing ``len(buffers)`` targets' gradients in ``buffers``.

    The copy writes autograd's bits; a target the pattern does not reach stays ``None``.
    """
    if not buffers:
        return backward

    def body(outs: Sequence[Tensor]) -> tuple[Tensor | None, ...]:
        grads = backward(outs)
        first = len(grads) - len(buffers)
        reached = [(b, g) for b, g in zip(buffers, grads[first:], strict=True) if g is not None]
        with torch.no_grad():
            copy_grouped([b for b, _ in reached], [g for _, g in reached])
        return (
            *grads[:first],
            *(None if g is None else b for b, g in zip(buffers, grads[first:], strict=True)),
        )

    return body


def _call(graph: None, body: Callable[[], _T]) -> _T:
    return body()


def _bind(
    run: Callable[[_G, Callable[[], tuple[Tensor | None, ...]]], tuple[Tensor | None, ...]],
    graph: _G,
    backward: BackwardBody,
    outputs: Sequence[Tensor],
) -> Callable[[], tuple[Tensor | None, ...]]:
    """Freeze one pattern's arguments (a closure in a loop would see the last pattern's)."""
    return lambda: run(graph, lambda: backward(outputs))


class UpdateGraph:
    """A graph of an in-place update (optimizer step, EMA), or its CPU stand-in."""

    def __init__(self, pool: ReplayPool) -> None:
        self.pool = pool
        self._graph: torch.cuda.CUDAGraph | None = None
        self._body: Callable[[], object] | None = None

    def capture(self, body: Callable[[], object]) -> None:
        """Record ``body``; on the CPU stand-in only check it for capture-unsafe operators.

        The stand-in's check runs ``body`` for real, so callers snapshot and restore around it.

        Raises:
            CaptureError: naming the operator that broke the capture when it is known.
        """
        if self.pool.uses_cuda:
            graph = torch.cuda.CUDAGraph()
            capture_with_trail(lambda: cuda_capture(graph, self.pool, body), False)
            self._graph = graph
        else:
            capture_with_trail(body, True)
        self._body = body
        self.pool.hold(self)

    def launch(self) -> None:
        """Run the recorded update."""
        if self._graph is not None:
            self._graph.replay()
        else:
            assert self._body is not None
            self._body()


class ForwardGraph:
    """A graph of a forward without autograd (evaluation, inference), or its CPU stand-in.

    Attributes:
        static_outputs: the flat outputs; a launch rewrites them in place.
    """

    def __init__(self, pool: ReplayPool) -> None:
        self.pool = pool
        self.static_outputs: tuple[Tensor, ...] = ()
        self._graph: torch.cuda.CUDAGraph | None = None
        self._body: ForwardBody | None = None

    def capture(self, body: ForwardBody) -> None:
        """Record ``body`` into the pool; the stand-in runs it once, checked for capture-unsafe
        operators, and keeps its outputs as the static outputs.

        Raises:
            CaptureError: naming the operator that broke the capture when it is known.
        """
        if self.pool.uses_cuda:
            graph = torch.cuda.CUDAGraph()
            self.static_outputs = capture_with_trail(
                lambda: cuda_capture(graph, self.pool, body), False
            )
            self._graph = graph
        else:
            outputs = capture_with_trail(body, True)
            with torch.inference_mode(False), torch.no_grad():
                self.static_outputs = tuple(o.clone() for o in outputs)
            self._body = body
        self.pool.hold(self)

    def launch(self) -> None:
        """Recompute :attr:`static_outputs` from the static inputs."""
        if self._graph is not None:
            self._graph.replay()
            return
        assert self._body is not None
        copy_grouped(self.static_outputs, self._body())


__all__ = [
    "BackwardBody",
    "ForwardBody",
    "ForwardGraph",
    "Pattern",
    "RegionGraphs",
    "UpdateGraph",
    "cuda_capture",
]
