"""A device tensor's host copy: started without waiting, read once the copy has landed."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.train.host_copy import HostCopies, HostCopy


def test_host_copy_of_a_cpu_tensor_is_the_tensor() -> None:
    tensor = torch.tensor([3, 1, 2])
    assert HostCopy(tensor).read() is tensor


@pytest.mark.gpu
def test_host_copy_starts_without_waiting_and_reads_the_device_values() -> None:
    tensor = torch.arange(5, device="cuda") * 7
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        copy = HostCopy(tensor)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    host = copy.read()
    assert host.device.type == "cpu"
    assert host.is_pinned()
    assert host.tolist() == [0, 7, 14, 21, 28]


def test_host_copy_of_a_cpu_tensor_is_ready_at_once() -> None:
    assert HostCopy(torch.tensor([True, False])).ready()


def test_host_copies_of_cpu_tensors_are_clones_in_order() -> None:
    first, second = torch.zeros(2), torch.arange(3)
    copies = HostCopies([first, second])
    first.add_(1)
    read = copies.read()
    assert [t.tolist() for t in read] == [[0.0, 0.0], [0, 1, 2]]
    assert read[0].data_ptr() != first.data_ptr()


@pytest.mark.gpu
def test_host_copies_take_the_values_queued_before_them_and_keep_shapes_and_dtypes() -> None:
    weights = torch.zeros(8, 3, 3, 3, device="cuda").to(memory_format=torch.channels_last)
    counter = torch.zeros((), dtype=torch.int64, device="cuda")
    cpu = torch.ones(2)
    torch.cuda._sleep(100_000_000)  # the device is still busy when the copies are asked
    weights.add_(torch.arange(8 * 27, device="cuda").view(8, 3, 3, 3))
    counter.add_(5)
    expected = weights.cpu()
    copies = HostCopies([weights, cpu, counter])
    weights.add_(1)  # queued after the copies
    counter.add_(1)
    read = copies.read()
    assert [(t.shape, t.dtype, t.device.type) for t in read] == [
        (weights.shape, torch.float32, "cpu"),
        (cpu.shape, torch.float32, "cpu"),
        (torch.Size([]), torch.int64, "cpu"),
    ]
    assert torch.equal(read[0], expected)
    assert read[2].item() == 5
