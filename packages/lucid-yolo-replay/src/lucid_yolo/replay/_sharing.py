"""Shared use: a tensor that gets gradient from inside and from outside a replayed region.

Eager autograd sums every use of a tensor in arrival order; a replay hands over the region's uses
already summed inside the graph, so an outside use changes the association of the sum and the
bits (docs/replay-invariants.md, invariant 5). Neither kind of target can be vetted once for
good: a parameter may be used outside from some step on, and an input is a new activation on
every call. So every replayed backward arms a probe on each target's gradient node.

A prehook on that node sees the sum of all incoming gradients; when the region is the only
contributor it is the very tensor handed over. A strong reference to the handed tensor, held
until the hook runs, keeps autograd from summing another contribution into it in place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.graph import get_gradient_edge
from torch.utils.hooks import RemovableHandle

from lucid_yolo.replay.retire import RetireReason

Retire = Callable[[RetireReason, str], None]
"""The recorder's ``retire(reason, detail)``."""
Edge = tuple[Any, int]
"""An autograd edge: the node a target's gradient flows into, and the input slot on it."""


class SharingProbe:
    """Retires the recorder when a replayed target also receives gradient from outside.

    Parameters keep one hook for the life of the recorder: holding the ``AccumulateGrad`` node
    keeps autograd reusing it, so the hook sees every later backward (native ones find nothing
    armed and pass). Inputs get a one-shot hook per replay, removed at the next one.

    Args:
        retire: called with the reason and a detail naming the target.
    """

    def __init__(self, retire: Retire) -> None:
        self._retire = retire
        self._armed: dict[int, list[Tensor]] = {}
        self._nodes: list[Any] = []
        self._input_hooks: list[RemovableHandle] = []

    def arm(
        self,
        edges: Sequence[Edge],
        handed: Sequence[Tensor | None],
        params: Sequence[nn.Parameter],
    ) -> None:
        """Arm a check on each target that is handed a gradient by this backward.

        Args:
            edges: ``ctx.next_functions`` of the replay node: the inputs' edges, then the
                parameters'.
            handed: the gradients handed to those edges, in the same order.
            params: the parameters, the tail of the targets.
        """
        self.disarm_inputs()
        num_inputs = len(edges) - len(params)
        for k, ((node, slot), grad) in enumerate(zip(edges, handed, strict=True)):
            if node is None or grad is None:
                continue
            if k < num_inputs:
                held = [grad]
                check = self._check(held, slot, RetireReason.SHARED_INPUT, _input_detail(k))
                self._input_hooks.append(node.register_prehook(check))
                continue
            index = k - num_inputs
            key = id(params[index])
            if key not in self._armed:
                self._armed[key] = []
                detail = _parameter_detail(index, len(params))
                node.register_prehook(
                    self._check(self._armed[key], slot, RetireReason.SHARED_PARAMETER, detail)
                )
                self._nodes.append(node)
            self._armed[key][:] = [grad]

    def disarm_inputs(self) -> None:
        """Remove the previous replay's input hooks (their nodes may still be alive)."""
        for handle in self._input_hooks:
            handle.remove()
        self._input_hooks.clear()

    def _check(
        self, held: list[Tensor], slot: int, reason: RetireReason, detail: str
    ) -> Callable[[Sequence[Tensor | None]], None]:
        def probe(grad_outputs: Sequence[Tensor | None]) -> None:
            if not held:
                return
            incoming = grad_outputs[slot]
            if incoming is not None and incoming.data_ptr() != held[0].data_ptr():
                self._retire(reason, detail)
            held.clear()

        return probe


_WRITTEN_IN_TASK: dict[int, int] = {}
"""Per parameter (by ``id``), the backward graph task in which a direct replay last wrote its
``.grad``, whichever recorder it was: graph task ids are never reused, so an entry left by a
freed parameter can never match a running backward."""


class OutsideUseWatch:
    """Retires a recorder that writes its parameters' ``.grad`` itself (``direct_gradients``)
    when a parameter gets gradient from anywhere else in the same backward.

    Such a recorder hands autograd no gradient for its parameters, so a parameter's
    ``AccumulateGrad`` node runs in a replayed backward only when something outside the region
    used the parameter, and then it sets or adds into the ``.grad`` the recorder writes. A
    prehook on each node (the nodes held, so that autograd keeps reusing them) notes the
    backward's graph task it ran in, and the recorder asks once that backward has ended (every
    node has run by then, so the outside use may come before or after the region's backward).
    A backward with no outside use runs none of the hooks; a native backward runs each once
    and they only take notes. A second direct write of a parameter in the same backward
    (another region sharing it, or a second call of this one) never runs the node: those are
    caught by :data:`_WRITTEN_IN_TASK` as they are written. Either way eager autograd would
    have summed the contributions before adding them to ``.grad``, and the direct writes add
    them one by one.

    Args:
        retire: called with the reason and a detail naming the parameter.
    """

    def __init__(self, retire: Retire) -> None:
        self._retire = retire
        self._hooks: dict[int, RemovableHandle] = {}
        self._nodes: list[Any] = []
        self._watched: dict[int, Sequence[nn.Parameter]] = {}
        self._task = -1
        self._used: list[str] = []

    def watch(self, params: Sequence[nn.Parameter]) -> None:
        """Hook the nodes of ``params`` not yet watched (each named by its place in
        ``params``, a recording's parameters). Called at every direct replay: a recording's
        tuple seen before returns at once (held, so its id stays its own)."""
        if self._watched.get(id(params)) is params:
            return
        self._watched[id(params)] = params
        for index, param in enumerate(params):
            if id(param) not in self._hooks:
                node = get_gradient_edge(param).node
                note = partial(self._note, _parameter_detail(index, len(params)))
                self._hooks[id(param)] = node.register_prehook(note)
                self._nodes.append(node)

    def _note(self, detail: str, grad_outputs: Sequence[Tensor | None]) -> None:
        task = torch._C._current_graph_task_id()
        if task != self._task:
            self._task, self._used = task, []
        self._used.append(detail)

    def written(self, params: Sequence[nn.Parameter]) -> None:
        """Record that this backward wrote ``params``' ``.grad``; retire if one of them was
        already written by a direct replay in the same backward."""
        task = torch._C._current_graph_task_id()
        keys = list(map(id, params))
        last_written = list(map(_WRITTEN_IN_TASK.get, keys))
        if task in last_written:
            index = last_written.index(task)
            self._retire(
                RetireReason.SHARED_PARAMETER,
                f"parameter {index} of {len(params)} also gets gradient from another replayed "
                "region (or a second call of this one) in the same backward; put every use "
                "inside one region",
            )
        _WRITTEN_IN_TASK.update(dict.fromkeys(keys, task))

    def check_at_end(self) -> None:
        """Queue, on the running backward, the retirement if a watched node runs in it."""
        torch.autograd.Variable._execution_engine.queue_callback(self._check)

    def _check(self) -> None:
        if self._used and self._task == torch._C._current_graph_task_id():
            detail, self._used = self._used[0], []
            self._retire(RetireReason.SHARED_PARAMETER, detail)

    def stop(self) -> None:
        """Remove every hook and let the nodes go: the recorder stopped replaying for good, and
        its native backwards should not pay a Python call a parameter."""
        for handle in self._hooks.values():
            handle.remove()
        self._hooks.clear()
        self._nodes.clear()
        self._watched.clear()


def _parameter_detail(index: int, count: int) -> str:
    return (
        f"parameter {index} of {count} also receives gradient from outside the region; put "
        "every use inside the region"
    )


def _input_detail(index: int) -> str:
    return (
        f"input {index} also receives gradient from outside the region (an activation used "
        "inside and outside it); use only the region's outputs outside it"
    )


__all__ = ["OutsideUseWatch", "SharingProbe"]
