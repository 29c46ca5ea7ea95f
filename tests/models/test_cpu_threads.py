"""One CPU thread for a block, the caller's count put back."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.models.cpu_threads import one_cpu_thread


def _raise_inside(seen: list[int]) -> None:
    with one_cpu_thread():
        seen.append(torch.get_num_threads())
        raise RuntimeError("inside")


def test_one_cpu_thread_puts_the_count_back_even_when_the_block_raises() -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    seen: list[int] = []
    try:
        with pytest.raises(RuntimeError, match="inside"):
            _raise_inside(seen)
        assert seen == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
