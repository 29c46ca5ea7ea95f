"""The layout probe finds every BatchNorm and max-pool call of a network, by input shape."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from tool_modules import load_tool

from lucid_yolo.models import create_model


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("probe_op_layouts", monkeypatch)


def test_layer_inputs_count_each_call_of_yolo26n_by_shape(probe: ModuleType) -> None:
    model = create_model("yolo26n", num_classes=3).to(memory_format=torch.channels_last)
    seen = probe.layer_inputs(model, batch=2, imgsz=64, device=torch.device("cpu"))
    kinds = {
        kind: sum(n for (k, _, _), n in seen.items() if k == kind)
        for kind in ("batch_norm", "max_pool")
    }
    # the SPPF block's one pool runs three times, every BatchNorm once
    assert kinds["max_pool"] == 3
    assert kinds["batch_norm"] == sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    ((_, pool_shape, pool_settings),) = [key for key in seen if key[0] == "max_pool"]
    assert pool_shape[0] == 2
    assert pool_shape[2:] == (2, 2)  # stride 32 at 64 px
    assert pool_settings == (5, 1, 2)
    assert all(shape[0] == 2 for _, shape, _ in seen)
