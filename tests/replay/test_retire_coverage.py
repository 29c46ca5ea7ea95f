"""Every retire reason has a CPU test that triggers it: adding a reason without one fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from lucid_yolo.replay import RetireReason

TESTS = Path(__file__).parent.parent
"""The ``tests/`` folder; the triggering tests live in ``replay/`` and ``train/``."""

RECORDER = "replay/test_recorder.py"

TRIGGERED_BY: dict[RetireReason, tuple[str, str]] = {
    RetireReason.CAPTURE_FAILED: (
        RECORDER,
        "test_recorder_capture_failure_names_op_and_restores_state",
    ),
    RetireReason.FORWARD_ALTERED: (RECORDER, "test_recorder_retires_when_forward_altered"),
    RetireReason.MODULE_HOOKS: (RECORDER, "test_recorder_retires_on_module_hook"),
    RetireReason.PARAMETER_HOOKS: (RECORDER, "test_recorder_retires_on_parameter_hook"),
    RetireReason.PARAMETER_REPLACED: (RECORDER, "test_recorder_retires_when_parameter_replaced"),
    RetireReason.SHARED_PARAMETER: (
        RECORDER,
        "test_recorder_retires_parameter_shared_outside_region_on_a_later_replay",
    ),
    RetireReason.SIGNATURE_LIMIT: (RECORDER, "test_recorder_signature_limit_runs_native"),
    RetireReason.UNSUPPORTED_INPUT: (RECORDER, "test_recorder_unsupported_input_runs_native"),
    RetireReason.UNSUPPORTED_MODULE: (
        RECORDER,
        "test_recorder_retires_on_batchnorm_cumulative_momentum",
    ),
    RetireReason.PARITY_MISMATCH: (
        "train/replay/test_step_verifier.py",
        "test_step_verifier_retires_on_injected_difference_and_keeps_native_result",
    ),
    RetireReason.SHARED_INPUT: (
        RECORDER,
        "test_recorder_retires_input_used_inside_and_outside_region",
    ),
    RetireReason.INTERLEAVED: (
        RECORDER,
        "test_recorder_second_forward_before_backward_runs_native",
    ),
    RetireReason.GRAD_LAYOUT: (
        "replay/test_grad_layout.py",
        "test_recorder_retires_when_gradient_layout_changes",
    ),
    RetireReason.BACKWARD_AUTOCAST: (
        RECORDER,
        "test_recorder_retires_when_backward_runs_under_autocast",
    ),
    RetireReason.INPUTS_CHANGED: (
        "train/replay/test_binding.py",
        "test_loss_region_with_changed_keys_runs_natively_with_a_reason",
    ),
}
"""Each reason, and the file (under ``tests/``) and name of a test that triggers it."""


def _test_source(path: str, name: str) -> str:
    tree = ast.parse((TESTS / path).read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.unparse(node)
    raise AssertionError(f"{path}::{name} does not exist: point the table at the right test")


def test_every_retire_reason_has_a_triggering_test() -> None:
    assert set(TRIGGERED_BY) == set(RetireReason)


def test_each_triggering_test_names_its_reason() -> None:
    for reason, (path, name) in TRIGGERED_BY.items():
        source = _test_source(path, name)
        assert reason.value in source or f"RetireReason.{reason.name}" in source, name
