"""What the depthwise warm-up probe's thread runs per variant, and its table."""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Any

import pytest
from conv_configs import conv_config
from tool_modules import load_tool


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_tool("probe_depthwise_warm", monkeypatch)


def _configs(tool: ModuleType) -> list[Any]:
    """A dense convolution, two depthwise ones that take a gradient, one whose input does not."""
    dense = conv_config(tool.ConvConfig, in_channels=64, out_channels=64, height=80, width=80)
    return [
        dense,
        dataclasses.replace(dense, groups=64),
        dataclasses.replace(dense, in_channels=128, out_channels=128, groups=128, height=40),
        dataclasses.replace(dense, groups=64, input_requires_grad=False),
    ]


def test_cold_runs_nothing_and_exact_runs_the_depthwise_convs_at_the_fits_shapes(
    tool: ModuleType,
) -> None:
    configs = _configs(tool)
    assert tool.warm_calls(configs, "cold") == []
    exact = tool.warm_calls(configs, "exact")
    assert [call.config for call in exact] == configs[1:]
    assert {(call.batch, call.backward) for call in exact} == {(0, True)}


def test_variants_change_one_thing_each(tool: ModuleType) -> None:
    configs = _configs(tool)
    one = tool.warm_calls(configs, "exact-one-image")
    assert [(c.config, c.batch) for c in one] == [(c, 1) for c in configs[1:]]
    forward = tool.warm_calls(configs, "exact-forward")
    assert [c.backward for c in forward] == [False] * 3
    weight = tool.warm_calls(configs, "exact-weight-grad")
    assert [c.config.input_requires_grad for c in weight] == [False] * 3
    assert [c.config.height for c in weight] == [80, 40, 80]
    small = tool.warm_calls(configs, "small")
    assert {(c.config.height, c.config.width, c.batch) for c in small} == {(16, 16, 1)}
    assert [c.config.in_channels for c in small] == [64, 128, 64]


def test_other_channels_keeps_one_call_per_kernel_stride_and_gradient(tool: ModuleType) -> None:
    calls = tool.warm_calls(_configs(tool), "other-channels")
    assert len(calls) == 2
    assert {c.config.groups for c in calls} == {32}
    assert {c.config.input_requires_grad for c in calls} == {True, False}


def test_operator_variants_run_the_exact_calls(tool: ModuleType) -> None:
    configs = _configs(tool)
    exact = tool.warm_calls(configs, "exact")
    assert tool.warm_calls(configs, "exact-ops") == exact
    assert tool.warm_calls(configs, "exact-parallel") == exact


@pytest.mark.parametrize("input_requires_grad", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_operator_call_gives_autograds_output_and_gradients(
    tool: ModuleType, input_requires_grad: bool, bias: bool
) -> None:
    import torch
    import torch.nn.functional as F

    config = conv_config(
        tool.ConvConfig, groups=8, bias=bias, input_requires_grad=input_requires_grad
    )
    call = tool.WarmCall(config, 0)
    y, *grads = tool.operator_call(call, 2, torch.device("cpu"), torch.contiguous_format)
    ones = {"dtype": torch.bfloat16}
    x = torch.ones(2, 8, 16, 16, **ones).requires_grad_(input_requires_grad)
    weight = torch.ones(8, 1, 3, 3, **ones).requires_grad_()
    bias_tensor = torch.ones(8, **ones).requires_grad_() if bias else None
    expected = F.conv2d(x, weight, bias_tensor, padding=1, groups=8)
    expected.backward(torch.ones_like(expected))
    assert torch.equal(y, expected)
    expected_grads = [x.grad, weight.grad, None if bias_tensor is None else bias_tensor.grad]
    for got, want in zip(grads, expected_grads, strict=True):
        assert (got is None) == (want is None)
        if want is not None:
            assert torch.equal(got, want)


def test_operator_call_without_backward_gives_the_output_alone(tool: ModuleType) -> None:
    import torch

    call = tool.WarmCall(conv_config(tool.ConvConfig, groups=8), 1, backward=False)
    outputs = tool.operator_call(call, 2, torch.device("cpu"), torch.contiguous_format)
    assert len(outputs) == 1
    assert outputs[0].shape == (1, 8, 16, 16)


def test_parallel_operator_calls_run_each_call_once_and_raise_a_threads_error(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import torch

    calls = [tool.WarmCall(config, 0) for config in _configs(tool)[1:]]
    seen: list[Any] = []
    all_running = threading.Barrier(len(calls), timeout=10)

    def recorded(call: Any, batch: int, where: torch.device) -> None:
        assert threading.current_thread() is not threading.main_thread()
        seen.append(call)
        all_running.wait()  # calls run one after another would break it

    monkeypatch.setattr(tool, "operator_call", recorded)
    tool.run_operator_calls(calls, 2, torch.device("cpu"), parallel=True)
    assert sorted(map(id, seen)) == sorted(map(id, calls))

    def failing(call: Any, batch: int, where: torch.device) -> None:
        raise RuntimeError(f"no plan for {call.config.in_channels}")

    monkeypatch.setattr(tool, "operator_call", failing)
    with pytest.raises(RuntimeError, match="no plan for"):
        tool.run_operator_calls(calls, 2, torch.device("cpu"), parallel=True)


def test_unknown_variant_is_refused(tool: ModuleType) -> None:
    with pytest.raises(ValueError, match="not one of"):
        tool.warm_calls(_configs(tool), "lukewarm")


def test_table_gives_median_and_range_per_variant_and_names_failures(tool: ModuleType) -> None:
    runs = [
        {
            "variant": "cold",
            "warm_convs": 0,
            "lightning_import_s": 2.0,
            "join_wait_s": 0.0,
            "first_call_excess_s": 7.0,
            "ready_s": 17.0,
        },
        {
            "variant": "cold",
            "warm_convs": 0,
            "lightning_import_s": 4.0,
            "join_wait_s": 0.0,
            "first_call_excess_s": 8.0,
            "ready_s": 19.0,
        },
        {"variant": "exact", "error": "timed out (40 s)"},
        {"variant": "small", "warm_convs": 9, "thread_error": "RuntimeError('cuDNN')"},
    ]
    table = tool.table(runs)
    assert "| cold | 2 | 0 | 3.000 (2.000-4.000) | — | 0.000 (0.000-0.000) |" in table
    assert "18.000 (17.000-19.000)" in table
    assert "exact failed: timed out (40 s)" in table
    assert "small failed: RuntimeError('cuDNN')" in table
    assert "| small |" not in table
