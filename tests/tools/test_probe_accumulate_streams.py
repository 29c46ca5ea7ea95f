"""The backward-host probe on the CPU stand-in: its variants train the same bits."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from tool_modules import load_tool


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("probe_accumulate_streams", monkeypatch)


@pytest.mark.slow
def test_native_and_replayed_backwards_give_the_same_gradients(probe: ModuleType) -> None:
    cpu = torch.device("cpu")
    native = probe.run_variant("native", 4, 1, 64, cpu)
    replay = probe.run_variant("replay", 4, 1, 64, cpu)
    direct = probe.run_variant("replay-direct", 4, 1, 64, cpu)
    assert native["grad_digest"] == replay["grad_digest"] == direct["grad_digest"]
    assert (native["replays"], replay["replays"], direct["replays"]) == (0, 3, 3)
    assert replay["native_calls"] == {"warm-up": 1}
    assert replay["host_backward_ms"] > 0
    assert replay["host_ops"]
    assert replay["cuda_api_per_backward"] == {}
