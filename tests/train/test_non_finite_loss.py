"""The non-finite loss guard: stop before the update, or skip it and count (issue 15)."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.train.exceptions import TrainConfigError
from lucid_yolo.train.non_finite_loss import NonFiniteLossError, NonFiniteLossGuard

NAN = torch.tensor(float("nan"))
INF = torch.tensor(float("inf"))
ONE = torch.tensor(1.0)


def _terms(box: torch.Tensor = ONE, cls: torch.Tensor = ONE) -> dict[str, torch.Tensor]:
    return {"box": box, "cls": cls}


def test_guard_allows_finite_step() -> None:
    guard = NonFiniteLossGuard("stop")
    guard.observe(ONE * 2, _terms())
    assert guard.allows_update(step=1)


def test_guard_allows_step_without_observation() -> None:
    assert NonFiniteLossGuard("stop").allows_update(step=1)


def test_guard_stop_names_step_and_non_finite_terms() -> None:
    guard = NonFiniteLossGuard("stop")
    guard.observe(NAN, _terms(box=NAN, cls=INF))
    with pytest.raises(NonFiniteLossError, match=r"step 7: .*non-finite terms: total, box, cls\)"):
        guard.allows_update(step=7)


def test_guard_stop_message_says_the_option_that_skips() -> None:
    guard = NonFiniteLossGuard("stop")
    guard.observe(INF, _terms(cls=INF))
    with pytest.raises(NonFiniteLossError, match=r"--model\.non_finite_loss skip"):
        guard.allows_update(step=1)


def test_guard_skip_counts_and_resets_for_next_step() -> None:
    guard = NonFiniteLossGuard("skip")
    guard.observe(NAN, _terms(box=NAN))
    assert not guard.allows_update(step=1)
    guard.observe(ONE, _terms())
    assert guard.allows_update(step=2)
    assert guard.skipped == 1


def test_guard_non_finite_first_micro_batch_blocks_the_step() -> None:
    guard = NonFiniteLossGuard("skip")
    guard.observe(NAN, _terms(cls=NAN))
    guard.observe(ONE, _terms())
    assert not guard.allows_update(step=1)


def test_guard_checks_every_element_of_a_tensor_term() -> None:
    guard = NonFiniteLossGuard("skip")
    guard.observe(ONE, _terms(box=torch.tensor([1.0, float("nan")])))
    assert not guard.allows_update(step=1)


def test_guard_unknown_policy_is_a_config_error() -> None:
    with pytest.raises(TrainConfigError, match=r"non_finite_loss='ignore' is not a policy"):
        NonFiniteLossGuard("ignore")  # type: ignore[arg-type]
