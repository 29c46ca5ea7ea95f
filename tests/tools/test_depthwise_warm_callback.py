"""The depthwise warm-up callback finds a fit's shapes cheaply and warms them on a thread."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("depthwise_warm_callback", monkeypatch)


@pytest.mark.parametrize("model", ["yolo26n", "yolo26n-seg", "yolo26n-pose", "yolo26n-obb"])
def test_shapes_scaled_from_64_px_equal_a_forward_at_the_fits_size(
    tool: ModuleType, model: str
) -> None:
    assert tool.fit_configs(model, 192, 3) == list(tool.network_convs(model, 192, 3))


def _fit(precision: str) -> tuple[SimpleNamespace, SimpleNamespace]:
    trainer = SimpleNamespace(
        precision=precision,
        datamodule=SimpleNamespace(imgsz=128, batch_size=2),
        is_global_zero=True,
    )
    module = SimpleNamespace(
        hparams={"model": "yolo26n", "num_classes": 3},
        device=torch.device("cpu"),
        memory_format=torch.contiguous_format,
    )
    return trainer, module


def test_callback_warms_each_depthwise_convolution_at_the_fits_shapes_before_training(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran: list[tuple[list[Any], int, torch.memory_format]] = []
    run = tool.run_warm_calls

    def counted(
        calls: list[Any], batch: int, where: torch.device, memory_format: torch.memory_format
    ) -> None:
        ran.append(([call.config for call in calls], batch, memory_format))
        run(calls, batch, where, memory_format)

    monkeypatch.setattr(tool, "run_warm_calls", counted)
    result = tmp_path / "warm.json"
    monkeypatch.setenv(tool.RESULT_ENV, str(result))
    generator_state = torch.get_rng_state()
    callback = tool.DepthwiseWarmUp()
    trainer, module = _fit("bf16-mixed")
    callback.on_fit_start(trainer, module)
    callback.on_train_start(trainer, module)

    at_128 = [c for c in tool.network_convs("yolo26n", 128, 3) if c.kind == "depthwise"]
    record = json.loads(result.read_text())
    assert at_128
    assert ran == [(at_128, 2, torch.contiguous_format)]
    assert record["convs"] == len(at_128)
    assert "thread_error" not in record
    assert record["thread_s"] > 0
    assert record["join_wait_s"] >= 0
    assert torch.equal(torch.get_rng_state(), generator_state)


def test_callback_leaves_other_precisions_alone(tool: ModuleType) -> None:
    callback = tool.DepthwiseWarmUp()
    trainer, module = _fit("32-true")
    callback.on_fit_start(trainer, module)
    callback.on_train_start(trainer, module)
    assert callback.result == {"skipped": "precision 32-true, not bf16-mixed"}
