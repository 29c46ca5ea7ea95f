"""beside_the_step: a batch's copies to a GPU run beside the step in flight, ready in order."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from busy_stream import SLEEP_CYCLES, copied_while_the_stream_is_busy

from lucid_yolo.train.data import device_copy
from lucid_yolo.train.data.device_copy import beside_the_step
from lucid_yolo.train.data.packed_batch import PackedBatch


def _packed(seed: int) -> PackedBatch:
    rng = np.random.default_rng(seed)
    images = [rng.integers(0, 256, (3, 256, 256), dtype=np.uint8) for _ in range(4)]
    boxes = [rng.uniform(0, 256, (8, 4)).astype(np.float32) for _ in range(4)]
    return PackedBatch.stack({"images": images, "boxes": boxes, "source_shapes": [(256, 256)]})


def test_beside_the_step_off_a_gpu_is_the_move_itself() -> None:
    packed = _packed(0)
    moved = beside_the_step(torch.device("cpu"), lambda: packed.to("cpu"))
    assert torch.equal(moved.buffer, packed.buffer)
    assert moved.extras == packed.extras


def test_a_gpu_with_one_stream_priority_copies_on_the_current_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """There a stream asked for above the default priority comes from the default priority's
    pool, which the replay pools' side streams share: no copy stream, the move as it is."""

    class OnePriorityStream:
        priority = 0

        def __init__(self, device: torch.device, priority: int = 0) -> None:
            self.device = device

    monkeypatch.setattr(torch.cuda, "Stream", OnePriorityStream)
    monkeypatch.setattr(torch.cuda, "current_stream", _no_stream_expected)
    device_copy._copy_stream.cache_clear()
    try:
        moved = beside_the_step(torch.device("cuda", 0), lambda: "moved")
    finally:
        device_copy._copy_stream.cache_clear()
    assert moved == "moved"


def _no_stream_expected(*_: object) -> None:
    raise AssertionError("the move ran beside a stream it should not have taken")


@pytest.mark.gpu
def test_gpu_beside_the_step_copies_while_the_current_stream_is_busy() -> None:
    pinned = _packed(1).pin_memory()
    device = torch.device("cuda")
    moved = copied_while_the_stream_is_busy(
        lambda: beside_the_step(device, lambda: pinned.to(device)).buffer, pinned.buffer
    )
    assert torch.equal(moved.cpu(), pinned.buffer)  # read after the current stream's sleep


@pytest.mark.gpu
def test_gpu_beside_the_step_makes_the_current_stream_wait_for_the_copy() -> None:
    pinned = _packed(2).pin_memory()
    device = torch.device("cuda")

    def slow_move() -> PackedBatch:
        torch.cuda._sleep(SLEEP_CYCLES // 4)  # on the copy stream, before the copy
        return pinned.to(device)

    moved = beside_the_step(device, slow_move)
    assert torch.equal(moved.buffer.cpu(), pinned.buffer)  # read on the current stream at once


@pytest.mark.gpu
def test_gpu_a_freed_batch_is_not_copied_over_before_the_step_reads_it() -> None:
    """A batch freed while the step that reads it still waits on the device: the next batch's
    copy (the same size) must not land in its memory before that read."""
    device = torch.device("cuda")
    first, second = _packed(3).pin_memory(), _packed(4).pin_memory()
    images = beside_the_step(device, lambda: first.to(device)).unpack()["images"]
    want = images.cpu()
    torch.cuda._sleep(SLEEP_CYCLES // 4)
    late = images.clone()  # the step's read, queued behind its other work
    del images
    beside_the_step(device, lambda: second.to(device))
    assert torch.equal(late.cpu(), want)


@pytest.mark.gpu
def test_gpu_beside_the_step_leaves_the_thread_on_its_stream() -> None:
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        beside_the_step(torch.device("cuda"), lambda: torch.ones(3).pin_memory().cuda())
        assert torch.cuda.current_stream() == stream
