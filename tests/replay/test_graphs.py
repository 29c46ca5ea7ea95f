"""The graph life cycle on the CPU stand-in: which static buffers a recording keeps."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from lucid_yolo.replay import ReplayPool
from lucid_yolo.replay._graphs import BackwardBody, Pattern, RegionGraphs


def _region() -> tuple[Tensor, nn.Parameter, dict[Pattern, BackwardBody], RegionGraphs]:
    """Input ``x`` and weight ``w`` (the targets), outputs ``x·w`` and ``(x + w)²``."""
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    w = nn.Parameter(torch.randn(3, 4))
    targets = (x, w)
    grad_outputs = (torch.randn(3, 4), torch.randn(3, 4))

    def backward_of(indices: tuple[int, ...]) -> BackwardBody:
        def backward(outs: Sequence[Tensor]) -> tuple[Tensor | None, ...]:
            return torch.autograd.grad(
                [outs[i] for i in indices],
                targets,
                [grad_outputs[i] for i in indices],
                allow_unused=True,
                retain_graph=True,
            )

        return backward

    patterns = {
        frozenset({"a"}): backward_of((0,)),
        frozenset({"b"}): backward_of((1,)),
        frozenset({"a", "b"}): backward_of((0, 1)),
    }
    return x, w, patterns, RegionGraphs(ReplayPool("cpu"))


def test_region_graphs_patterns_share_one_set_of_parameter_gradients() -> None:
    x, w, patterns, graphs = _region()
    graphs.capture(lambda: (x * w, (x + w).square()), patterns, (w,))
    (buffer,) = graphs.parameter_grads
    assert all(grads[1] is buffer for grads in graphs.static_grads.values())
    input_grads = [grads[0] for grads in graphs.static_grads.values()]
    assert len({id(g) for g in input_grads}) == len(patterns)


def test_region_graphs_shared_parameter_gradient_holds_the_launched_patterns_bits() -> None:
    x, w, patterns, graphs = _region()
    graphs.capture(lambda: (x * w, (x + w).square()), patterns, (w,))
    for pattern in (frozenset({"b"}), frozenset({"a"}), frozenset({"a", "b"})):
        graphs.launch_forward()
        graphs.launch_backward(pattern)
        outs = (x * w, (x + w).square())
        expected = patterns[pattern](outs)
        got = graphs.static_grads[pattern]
        for e, g in zip(expected, got, strict=True):
            assert e is not None
            assert g is not None
            assert torch.equal(e.view(torch.int32), g.view(torch.int32))


def test_region_graphs_without_parameters_keep_a_set_per_pattern() -> None:
    x, _, patterns, graphs = _region()
    graphs.capture(lambda: (x * 2.0, x.square()), patterns)
    assert graphs.parameter_grads == ()
    first = [grads[0] for grads in graphs.static_grads.values()]
    assert len({id(g) for g in first}) == len(patterns)
