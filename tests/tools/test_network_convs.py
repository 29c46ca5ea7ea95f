"""The recording of a network's convolutions by configuration, for the first-call probe."""

from __future__ import annotations

import dataclasses
import json
from types import ModuleType
from typing import Any

import pytest
from conv_configs import conv_config
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("network_convs", monkeypatch)


def _config(tool: ModuleType, **changes: Any) -> Any:
    return conv_config(tool.ConvConfig, **changes)


def test_network_convs_counts_each_configuration_of_yolo26n(tool: ModuleType) -> None:
    counts = tool.network_convs("yolo26n", 32, 5)
    # one forward calls each of the net's 126 convolutions once; 62 configurations are distinct
    assert (len(counts), sum(counts.values())) == (62, 126)
    kinds = [config.kind for config in counts]
    assert (kinds.count("dense"), kinds.count("depthwise")) == (53, 9)
    stem = next(iter(counts))
    assert stem.describe() == "3→16 k3 s2 on 32×32 (float32 input, input without grad)"
    assert [c.input_dtype for c in counts].count("float32") == 1


def test_network_convs_of_the_segment_net_include_its_transposed_conv(tool: ModuleType) -> None:
    counts = tool.network_convs("yolo26n-seg", 32, 5)
    assert [config.kind for config in counts].count("transposed") == 1


def test_conv_config_survives_a_json_round_trip(tool: ModuleType) -> None:
    config = _config(tool, groups=8)
    fields = json.loads(json.dumps(dataclasses.asdict(config)))
    assert tool.ConvConfig.from_json(fields) == config


def test_conv_config_kind_names_depthwise_grouped_and_transposed(tool: ModuleType) -> None:
    assert _config(tool, groups=8).kind == "depthwise"
    assert _config(tool, groups=2).kind == "grouped"
    assert _config(tool, groups=8, transposed=True).kind == "transposed"
    assert _config(tool).kind == "dense"


def test_conv_config_standalone_builds_the_recorded_module(tool: ModuleType) -> None:
    transposed = _config(tool, transposed=True, kernel=(2, 2), stride=(2, 2), padding=(0, 0))
    module = transposed.standalone()
    assert type(module).__name__ == "ConvTranspose2d"
    assert (module.kernel_size, module.stride, module.bias) == ((2, 2), (2, 2), None)
    assert _config(tool, groups=8).standalone().groups == 8
