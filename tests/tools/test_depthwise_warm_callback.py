"""The depthwise warm-up callback finds a fit's shapes cheaply and warms them on a thread."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("depthwise_warm_callback", monkeypatch)


@pytest.mark.parametrize("imgsz", [128, 96])
def test_fit_configs_equal_a_forward_at_the_fits_size(tool: ModuleType, imgsz: int) -> None:
    assert tool.fit_configs("yolo26n", imgsz, 3) == list(tool.network_convs("yolo26n", imgsz, 3))


def _fit(precision: str) -> tuple[SimpleNamespace, SimpleNamespace]:
    trainer = SimpleNamespace(
        precision=precision,
        datamodule=SimpleNamespace(imgsz=64, batch_size=2),
        is_global_zero=True,
    )
    module = SimpleNamespace(
        hparams={"model": "yolo26n", "num_classes": 3}, device=torch.device("cpu")
    )
    return trainer, module


def test_callback_warms_every_depthwise_convolution_before_training(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran: list[tuple[int, int]] = []
    run = tool.run_warm_calls

    def counted(calls: list[object], batch: int, where: torch.device) -> None:
        ran.append((len(calls), batch))
        run(calls, batch, where)

    monkeypatch.setattr(tool, "run_warm_calls", counted)
    result = tmp_path / "warm.json"
    monkeypatch.setenv(tool.RESULT_ENV, str(result))
    callback = tool.DepthwiseWarmUp()
    trainer, module = _fit("bf16-mixed")
    callback.on_fit_start(trainer, module)
    callback.on_train_start(trainer, module)

    depthwise = [c for c in tool.fit_configs("yolo26n", 64, 3) if c.kind == "depthwise"]
    record = json.loads(result.read_text())
    assert depthwise
    assert ran == [(len(depthwise), 2)]
    assert record["convs"] == len(depthwise)
    assert "thread_error" not in record
    assert record["thread_s"] > 0
    assert record["join_wait_s"] >= 0


def test_callback_leaves_other_precisions_alone(tool: ModuleType, tmp_path: Path) -> None:
    callback = tool.DepthwiseWarmUp()
    trainer, module = _fit("32-true")
    callback.on_fit_start(trainer, module)
    callback.on_train_start(trainer, module)
    assert callback.result == {"skipped": "precision 32-true, not bf16-mixed"}
