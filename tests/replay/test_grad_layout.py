"""Static gradient buffers take the layout of the gradients native autograd hands the outputs.

On the CPU stand-in the kernels are the same eager ones on both sides, so most of these tests pin
the bookkeeping (which strides the buffers get, when a changed layout retires). The rounding a
layout changes shows on the CPU too, on one intra-op thread: a bias gradient sums the incoming
gradient in an order that follows its strides (the cause of the replayed network's difference
under DDP, whose ranks run one thread each: docs/engineering/multi-gpu.md). On a GPU,
``tools/probe_segment_layout.py`` and the ``gpu`` parity tests check it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
from replay_nets import make_net
from torch import Tensor, nn

from lucid_yolo.replay import (
    ModuleRegion,
    RegionRecorder,
    ReplayRetiredWarning,
    RetireReason,
    first_difference,
    grads_of,
    state_digest,
)
from lucid_yolo.replay._grad_layout import dense, same_layout

Loss = Callable[[dict[str, Tensor]], Tensor]


def _nchw_loss(outputs: dict[str, Tensor]) -> Tensor:
    """A plain loss: its gradients come back NCHW whatever the outputs' layout (checked on the
    CPU: the expanded gradient of ``mean`` times a channels-last tensor is laid out NCHW)."""
    return sum(o.square().mean() for o in outputs.values())  # type: ignore[return-value]


def _channels_last_loss(outputs: dict[str, Tensor]) -> Tensor:
    """The same loss, its gradients handed to the outputs in ``channels_last``."""
    for output in outputs.values():
        output.register_hook(lambda g: g.contiguous(memory_format=torch.channels_last))
    return _nchw_loss(outputs)


def _channels_last_net() -> torch.nn.Module:
    return make_net().to(memory_format=torch.channels_last)


def _images(generator: torch.Generator | None = None) -> Tensor:
    x = torch.randn(2, 3, 8, 8, generator=generator)
    return x.contiguous(memory_format=torch.channels_last)


def _static_grads(recorder: RegionRecorder) -> list[Tensor]:
    (recording,) = recorder._recordings.values()
    return list(recording.static_grad_outputs.values())


def test_dense_accepts_any_dimension_order() -> None:
    x = torch.zeros(2, 3, 4, 5)
    assert dense(x)
    assert dense(x.contiguous(memory_format=torch.channels_last))
    assert dense(x.permute(0, 2, 3, 1))


def test_dense_rejects_expanded_and_sliced_tensors() -> None:
    assert not dense(torch.zeros(()).expand(2, 3))
    assert not dense(torch.zeros(2, 6)[:, :3])


def test_same_layout_ignores_size_one_dimensions() -> None:
    a = torch.zeros(2, 1, 4, 4)
    b = torch.zeros(2, 1, 4, 4).contiguous(memory_format=torch.channels_last)
    assert same_layout(a, b)
    assert not same_layout(
        torch.zeros(2, 3, 4, 4),
        torch.zeros(2, 3, 4, 4).contiguous(memory_format=torch.channels_last),
    )


@pytest.mark.parametrize(
    ("loss", "channels_last"), [(_nchw_loss, False), (_channels_last_loss, True)]
)
def test_recorder_static_gradients_take_the_native_warmup_layout(
    loss: Loss, channels_last: bool
) -> None:
    recorder = RegionRecorder(ModuleRegion(_channels_last_net()))
    for _ in range(2):
        loss(recorder(_images())).backward()  # type: ignore[arg-type]
    assert recorder.telemetry.replays == 1
    for static in _static_grads(recorder):
        assert static.is_contiguous(memory_format=torch.channels_last) is channels_last


def test_recorder_without_warmup_keeps_the_output_layout() -> None:
    recorder = RegionRecorder(ModuleRegion(_channels_last_net()), warmup_steps=0)
    _channels_last_loss(recorder(_images())).backward()  # type: ignore[arg-type]
    for static in _static_grads(recorder):
        assert static.is_contiguous(memory_format=torch.channels_last)


def test_recorder_with_nchw_gradients_matches_native() -> None:
    native, replayed = _channels_last_net(), _channels_last_net()
    recorder = RegionRecorder(ModuleRegion(replayed))
    for step in range(3):
        x = _images(torch.Generator().manual_seed(step))
        for net, forward in ((native, native), (replayed, recorder)):
            net.zero_grad(set_to_none=True)
            torch.manual_seed(step)
            _nchw_loss(forward(x)).backward()  # type: ignore[arg-type]
        expected = state_digest([native, grads_of(native)])
        assert first_difference(expected, state_digest([replayed, grads_of(replayed)])) is None
    assert recorder.telemetry.replays == 2
    assert recorder.retired is None


def test_recorder_retires_when_gradient_layout_changes() -> None:
    recorder = RegionRecorder(ModuleRegion(_channels_last_net()))
    for _ in range(2):
        _nchw_loss(recorder(_images())).backward()  # type: ignore[arg-type]
    assert recorder.retired is None
    outputs = recorder(_images())
    with pytest.warns(ReplayRetiredWarning, match=r"grad-layout: the gradient of output 'a.box'"):
        _channels_last_loss(outputs).backward()  # type: ignore[arg-type]
    assert recorder.retired is not None
    assert recorder.retired.reason is RetireReason.GRAD_LAYOUT
    recorder(_images())
    assert recorder.telemetry.native_calls["retired"] == 1


class _LevelHeads(nn.Module):
    """Three 1x1 heads over three scales, flattened and concatenated along the anchors, like
    the YOLO head's ``o2m.box`` ``(B, 4, A)``."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(64, 4, 1) for _ in range(3))

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        levels = (x, nn.functional.avg_pool2d(x, 2), nn.functional.avg_pool2d(x, 4))
        flat = [conv(level).flatten(2) for conv, level in zip(self.convs, levels, strict=True)]
        return {"box": torch.cat(flat, 2)}


def _anchor_major_loss(outputs: dict[str, Tensor], weight: Tensor) -> Tensor:
    """A loss that reads ``box`` as ``(B, A, 4)``, as the YOLO loss does: the gradient it hands
    back is transposed, strides ``(4A, 1, 4)``."""
    return (outputs["box"].transpose(1, 2) * weight).sum()


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread, as torchrun gives every rank (``OMP_NUM_THREADS=1``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
def test_recorder_with_transposed_gradients_matches_native_on_one_thread() -> None:
    # with the static buffers laid out as the outputs (contiguous) instead of as the learned
    # native gradient, convs.0.bias differed from the first replay on
    torch.manual_seed(0)
    native = _LevelHeads()
    torch.manual_seed(0)
    replayed = _LevelHeads()
    recorder = RegionRecorder(ModuleRegion(replayed))
    for step in range(4):
        generator = torch.Generator().manual_seed(step)
        x = torch.randn(2, 64, 16, 16, generator=generator)
        weight = torch.randn(2, 256 + 64 + 16, 4, generator=generator)
        for net, forward in ((native, native), (replayed, recorder)):
            net.zero_grad(set_to_none=True)
            _anchor_major_loss(forward(x), weight).backward()  # type: ignore[arg-type]
        expected = state_digest(grads_of(native))
        assert first_difference(expected, state_digest(grads_of(replayed))) is None, step
    assert recorder.telemetry.replays == 3
    assert recorder.retired is None
