"""A device tensor's host copy: started without waiting, read once the copy has landed."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.train.host_copy import HostCopy


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
