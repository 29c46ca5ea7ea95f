"""The parity matrix's cases: which regions replay and how many replays each must show."""

from __future__ import annotations

from types import ModuleType

import pytest
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("parity_matrix", monkeypatch)


def _fit(tool: ModuleType, micro_batches: int, updates: int) -> object:
    return tool._Fit({}, [], [], {}, 0, [], updates, micro_batches, {})


def test_a_segment_case_chains_its_regions_or_records_them_as_one(tool: ModuleType) -> None:
    chained = tool.Case("segment", "bf16-mixed", 2, "contiguous")
    one = tool.Case("segment", "bf16-mixed", 2, "contiguous", one_region=True)
    config = chained.replay_config()
    assert (config.segment_heads, config.loss_with_network) == (True, False)
    config = one.replay_config()
    assert (config.network, config.loss, config.update) == (True, True, True)
    assert (config.segment_heads, config.loss_with_network) == (False, True)
    assert one.name == "segment/bf16-mixed/acc2/contiguous/one-region"
    fit = _fit(tool, micro_batches=8, updates=4)
    assert tool._expected(fit, chained) == {
        "network": 7,
        "segment-heads": 7,
        "loss": 7,
        "optimizer MuSGD": 3,
    }
    assert tool._expected(fit, one) == {"network+loss": 7, "optimizer MuSGD": 3}
