"""The backward-host probe on the CPU stand-in: a direct replay trains the native bits."""

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
    native = probe.run_variant("native", 3, 1, 64, cpu)
    direct = probe.run_variant("replay-direct", 3, 1, 64, cpu)
    assert native["grad_digest"] == direct["grad_digest"]
    assert (native["replays"], direct["replays"]) == (0, 2)
    assert direct["native_calls"] == {"warm-up": 1}
    assert direct["host_backward_ms"] > 0
    assert direct["host_ops"]
    assert direct["cuda_api_per_backward"] == {}
