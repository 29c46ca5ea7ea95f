"""The layout benchmark's variants: cuDNN-deterministic holds its flag while a step is captured;
the casts-together variant is a channels-last one."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest
import torch
from tool_modules import load_tool


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("bench_memory_format", monkeypatch)


@pytest.mark.parametrize("flag_before", [False, True])
def test_deterministic_variant_captures_with_the_flag_and_puts_it_back(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch, flag_before: bool
) -> None:
    seen: list[bool] = []

    def capture(name: str, batch: int, imgsz: int, layout: str) -> Callable[[], None]:
        seen.append(torch.backends.cudnn.deterministic)
        if layout == "contiguous":
            raise RuntimeError("capture failed")
        return lambda: None

    monkeypatch.setattr(bench, "_captured_step", capture)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", flag_before)
    bench._graphed_step("yolo26n", 1, 64, bench.DETERMINISTIC)
    bench._graphed_step("yolo26n", 1, 64, "channels_last")
    with pytest.raises(RuntimeError, match="capture failed"):
        bench._graphed_step("yolo26n", 1, 64, "contiguous")
    assert seen == [True, False, False]
    assert torch.backends.cudnn.deterministic is flag_before


def test_only_the_casts_together_variant_casts_the_weights_together(bench: ModuleType) -> None:
    assert bench.LAYOUTS[bench.CASTS_TOGETHER] is torch.channels_last
    layouts = list(bench.LAYOUTS)
    models = {layout: bench._model("yolo26n", layout) for layout in layouts}
    together = {layout: model.casts_weights_together for layout, model in models.items()}
    assert together == {layout: layout == bench.CASTS_TOGETHER for layout in layouts}
