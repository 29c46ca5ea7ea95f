"""Autograd-side helpers of the recorder: gradient routing, patterns, aliases, nesting.

Kept apart from :mod:`lucid_yolo.replay.recorder` so that the rules autograd equality rests on
(docs/replay-invariants.md, invariants 2-5) read in one place.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence

import torch
from torch import Tensor, nn

from lucid_yolo.replay._copies import copy_grouped
from lucid_yolo.replay._graphs import Pattern

_FOREACH_CLONE: Callable[[list[Tensor]], list[Tensor]] | None = getattr(
    torch, "_foreach_clone", None
)
"""``torch._foreach_clone``, which torch's oldest supported releases may lack."""

_ANCESTRY_LIMIT = 256
"""Autograd nodes walked to prove that a forward depends on an open one (then it is nested)."""


@contextlib.contextmanager
def swapped(modules: Sequence[nn.Module], aliases: dict[int, nn.Parameter]) -> Iterator[None]:
    """Register ``aliases[id(p)]`` in place of each parameter ``p`` for the duration."""
    swapped: list[tuple[dict[str, nn.Parameter | None], str, nn.Parameter]] = []
    for module in modules:
        registry: dict[str, nn.Parameter | None] = vars(module)["_parameters"]
        for name, param in registry.items():
            if param is not None and id(param) in aliases:
                swapped.append((registry, name, param))
                registry[name] = aliases[id(param)]
    try:
        yield
    finally:
        for registry, name, param in swapped:
            registry[name] = param


def gradient_patterns(
    groups: dict[str, tuple[int, ...]], differentiable: Sequence[int]
) -> dict[Pattern, tuple[int, ...]]:
    """Differentiable output indices of every non-empty subset of groups that has any."""
    names = sorted(groups)
    patterns: dict[Pattern, tuple[int, ...]] = {}
    for r in range(1, len(names) + 1):
        for subset in itertools.combinations(names, r):
            indices = tuple(i for i in differentiable if any(i in groups[n] for n in subset))
            graded = frozenset(n for n in subset if any(i in groups[n] for i in differentiable))
            if indices and graded == frozenset(subset):
                patterns[graded] = indices
    return patterns


def route(
    lives: Sequence[Tensor],
    statics: Sequence[Tensor | None],
    private: bool,
    spares: Sequence[Tensor | None] | None = None,
) -> tuple[Tensor | None, ...]:
    """The gradients to hand autograd for the targets, as AccumulateGrad expects them.

    First micro-batch (``.grad`` undefined): a private tensor with the parameter's strides,
    which AccumulateGrad adopts — never the static buffer, which the next replay overwrites
    (the g0+g1 → 2·g1 bug, invariant 2), and never zeros + g (invariant 3). Later micro-batches:
    the static buffer itself, which AccumulateGrad adds in place, prev + new (invariant 4).
    Non-leaf inputs pass their gradient on to an upstream node: always a private copy, laid out
    as the recorded backward produced it, which is how native autograd hands it on (a region
    before this one learned that layout on its warm-up, :mod:`._grad_layout`).

    A parameter's private tensor is its spare where it has one of its layout and dtype (a
    tensor of an earlier backward that nothing else holds, :mod:`._recycling`); the others are
    clones of their statics, made with their allocations by one ``torch._foreach_clone`` where
    torch has it (an ``empty_like`` each before), except a parameter whose strides differ from
    its static's (or whose clone came out so), which gets an ``empty_strided``. Whatever is not
    cloned is filled by one grouped copy. A Python allocation per parameter cost more host time
    than the rest of the hand-off, and at small batch the replayed step is bound by the host's
    work (session 30).

    Args:
        lives: the targets (inputs, then parameters).
        statics: per target, the static gradient the backward graph wrote, or ``None`` for none.
        private: hand private copies even to targets that already hold a gradient.
        spares: per target, a tensor it may be handed with the static's bits written into it,
            or ``None``; ``None`` for no spares at all.
    """
    handed: list[Tensor | None] = list(statics)
    destinations: list[Tensor] = []
    sources: list[Tensor] = []
    clones: list[int] = []
    for k, (live, static) in enumerate(zip(lives, statics, strict=True)):
        if static is None:
            continue
        if not live.is_leaf:
            clones.append(k)
            continue
        if not private and live.grad is not None:
            continue
        spare = None if spares is None else spares[k]
        if spare is None or spare.dtype != static.dtype or spare.stride() != live.stride():
            if static.stride() == live.stride():
                clones.append(k)
                continue
            spare = torch.empty_strided(
                live.shape, live.stride(), dtype=static.dtype, device=static.device
            )
        handed[k] = spare
        destinations.append(spare)
        sources.append(static)
    originals = [statics[k] for k in clones]
    if _FOREACH_CLONE is not None:
        copies = _FOREACH_CLONE(originals) if originals else []  # type: ignore[arg-type]
    else:
        copies = list(map(torch.empty_like, originals))  # type: ignore[arg-type]
        destinations += copies
        sources += originals  # type: ignore[arg-type]
    for k, copy in zip(clones, copies, strict=True):
        live = lives[k]
        if live.is_leaf and copy.stride() != live.stride():
            # a static that is not dense clones to other strides than it has: rare, exact
            copy = torch.empty_strided(
                live.shape, live.stride(), dtype=copy.dtype, device=copy.device
            )
            destinations.append(copy)
            sources.append(statics[k])  # type: ignore[arg-type]
        handed[k] = copy
    copy_grouped(destinations, sources)
    return tuple(handed)


def reached_targets(
    outputs: Sequence[Tensor],
    differentiable: Sequence[int],
    targets: Sequence[Tensor],
    grad_outputs: Mapping[int, Tensor],
    *,
    keep_graph: bool = True,
) -> dict[int, frozenset[int]]:
    """Per differentiable output, the positions of the targets its gradient reaches.

    Asked of autograd itself, one backward per output with ``allow_unused=True`` (``None`` for
    a target the output does not reach), so the answer is the native one by construction. The
    reverted defect-2 fix (``cc8dfbc``) walked ``grad_fn.next_functions`` instead, keyed on the
    ``id()`` of node wrappers that are freed and recreated during the walk, and on the GPU
    every target came out unreached; why exactly was not established.

    Args:
        outputs: the region's flat outputs, autograd-connected to ``targets``.
        differentiable: indices of the outputs that require grad.
        targets: the inputs and parameters gradients are computed for.
        grad_outputs: per differentiable output, a gradient of its shape (values unused).
        keep_graph: ``False`` lets the last backward free the graph's saved tensors as it
            goes, as a native backward does, so it needs no more memory than one.
    """
    reach = {}
    last = differentiable[-1] if differentiable else None
    for i in differentiable:
        grads = torch.autograd.grad(
            outputs[i],
            targets,
            grad_outputs[i],
            allow_unused=True,
            retain_graph=keep_graph or i != last,
        )
        reach[i] = frozenset(k for k, g in enumerate(grads) if g is not None)
    return reach


def depends_on(inputs: Sequence[Tensor], node_id: int) -> bool:
    """Whether an input's autograd history reaches the node ``node_id`` (bounded walk)."""
    frontier = [t.grad_fn for t in inputs if t.grad_fn is not None]
    seen: set[int] = set()
    while frontier and len(seen) < _ANCESTRY_LIMIT:
        node = frontier.pop()
        if id(node) == node_id:
            return True
        if id(node) in seen:
            continue
        seen.add(id(node))
        frontier.extend(n for n, _ in node.next_functions if n is not None)
    return False


def unsupported_module(modules: Sequence[nn.Module]) -> str | None:
    """Why one of ``modules`` cannot be recorded, or ``None``."""
    for module in modules:
        if isinstance(module, nn.SyncBatchNorm) and module.training:
            return (
                "SyncBatchNorm exchanges batch statistics between processes inside its forward "
                "and backward; a graph would record those collectives and every rank would have "
                "to replay in lockstep: use BatchNorm (no sync_batchnorm) to replay the region"
            )
        if (
            isinstance(module, nn.modules.batchnorm._BatchNorm)
            and module.training
            and module.track_running_stats
            and module.momentum is None
        ):
            return (
                f"{type(module).__name__}(momentum=None) reads num_batches_tracked on the host "
                "every step; give it a float momentum"
            )
    return None


__all__ = [
    "depends_on",
    "gradient_patterns",
    "reached_targets",
    "route",
    "swapped",
    "unsupported_module",
]
