"""A step's timeline points: host clocks on the CPU, CUDA events on a GPU."""

from __future__ import annotations

import time

import pytest
import torch

from lucid_yolo.train.callbacks.device_clock import DeviceClock


def test_host_clock_measures_the_time_between_two_points() -> None:
    earlier = DeviceClock(cuda=False)
    time.sleep(0.02)
    later = DeviceClock(cuda=False)
    assert later.done()
    # sleep waits at least its time, so this bound holds on any machine, however loaded
    assert later.ms_since(earlier) >= 19.0


@pytest.mark.gpu
def test_cuda_clock_measures_the_device_work_between_two_points() -> None:
    a = torch.randn(4096, 4096, device="cuda")
    earlier = DeviceClock(cuda=True)
    for _ in range(8):
        a = a @ a / 4096
    later = DeviceClock(cuda=True)
    torch.cuda.synchronize()
    assert later.done()
    assert later.ms_since(earlier) > 0.0
