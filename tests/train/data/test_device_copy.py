"""beside_the_step: a batch's copies to a GPU run beside the step in flight, ready in order."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from busy_stream import copied_while_the_stream_is_busy

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


@pytest.mark.gpu
def test_gpu_beside_the_step_copies_while_the_current_stream_is_busy() -> None:
    pinned = _packed(1).pin_memory()
    device = torch.device("cuda")
    moved = copied_while_the_stream_is_busy(
        lambda: beside_the_step(device, lambda: pinned.to(device)).buffer, pinned.buffer
    )
    assert torch.equal(moved.cpu(), pinned.buffer)  # read after the current stream's sleep


@pytest.mark.gpu
def test_gpu_beside_the_step_leaves_the_thread_on_its_stream() -> None:
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        beside_the_step(torch.device("cuda"), lambda: torch.ones(3).pin_memory().cuda())
        assert torch.cuda.current_stream() == stream
