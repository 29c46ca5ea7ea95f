"""The non-finite loss guard: stop before the update, or skip it and count (issue 15)."""

from __future__ import annotations

import pytest
import torch

from lucid_yolo.train.exceptions import TrainConfigError, TrainError
from lucid_yolo.train.host_copy import HostCopy
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


@pytest.mark.parametrize(
    ("box", "finite"),
    [
        (torch.tensor([1.0, float("inf")]), False),
        (torch.tensor([[float("-inf"), 0.0]]), False),
        (torch.tensor([3.0e38, 3.0e38]), True),  # finite, though their sum overflows
        (torch.tensor([-2.0, 0.5], dtype=torch.bfloat16), True),
        (torch.tensor([1, 2]), True),
    ],
)
def test_guard_reads_a_tensor_term_by_its_elements_only(box: torch.Tensor, finite: bool) -> None:
    guard = NonFiniteLossGuard("skip")
    guard.observe(ONE.to(torch.bfloat16), _terms(box=box))
    assert guard.allows_update(step=1) is finite


def test_guard_unknown_policy_is_a_config_error() -> None:
    with pytest.raises(TrainConfigError, match=r"non_finite_loss='ignore' is not a policy"):
        NonFiniteLossGuard("ignore")  # type: ignore[arg-type]


class _Undo:
    """Counts calls; the state a late check puts back."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def test_guard_late_finite_step_is_not_undone() -> None:
    guard, undo = NonFiniteLossGuard("stop"), _Undo()
    guard.observe(ONE, _terms())
    guard.seal(step=1)
    assert guard.pending
    guard.settle(undo)
    assert not guard.pending
    assert undo.calls == 0


def test_guard_late_stop_undoes_then_names_the_sealed_step() -> None:
    guard, undo = NonFiniteLossGuard("stop"), _Undo()
    guard.observe(NAN, _terms(box=NAN))
    guard.seal(step=7)
    guard.observe(ONE, _terms(cls=NAN))  # the next step's loss: not this verdict's
    with pytest.raises(NonFiniteLossError, match=r"step 7: .*non-finite terms: total, box\)"):
        guard.settle(undo)
    assert undo.calls == 1


def test_guard_late_skip_undoes_and_counts() -> None:
    guard, undo = NonFiniteLossGuard("skip"), _Undo()
    guard.observe(ONE, _terms(cls=INF))
    guard.seal(step=2)
    guard.settle(undo)
    assert (undo.calls, guard.skipped) == (1, 1)


def test_guard_late_check_while_failing_undoes_without_raising_or_agreeing() -> None:
    asked: list[bool] = []
    guard, undo = NonFiniteLossGuard("stop", agree=asked.append), _Undo()  # type: ignore[arg-type]
    guard.observe(NAN, _terms())
    guard.seal(step=3)
    guard.settle(undo, failing=True)
    assert undo.calls == 1
    assert asked == []


def test_guard_late_check_agrees_with_other_processes() -> None:
    guard, undo = NonFiniteLossGuard("skip", agree=lambda finite: False), _Undo()
    guard.observe(ONE, _terms())
    guard.seal(step=4)
    guard.settle(undo)
    assert (undo.calls, guard.skipped) == (1, 1)


def test_guard_seal_without_observation_keeps_the_pending_step() -> None:
    guard, undo = NonFiniteLossGuard("skip"), _Undo()
    guard.observe(NAN, _terms())
    guard.seal(step=1)
    guard.seal(step=2)  # e.g. the verifier's shadow update: no loss observed
    guard.settle(undo)
    assert guard.skipped == 1


def test_guard_seal_while_a_step_awaits_its_check_is_an_error() -> None:
    guard = NonFiniteLossGuard("skip")
    guard.observe(ONE, _terms())
    guard.seal(step=1)
    guard.observe(ONE, _terms())
    with pytest.raises(TrainError, match=r"step 2 was sealed while step 1 awaits its check"):
        guard.seal(step=2)


class _CountedCopy(HostCopy):
    """A host copy that counts how many were started."""

    started = 0

    def __init__(self, tensor: torch.Tensor) -> None:
        super().__init__(tensor)
        _CountedCopy.started += 1


@pytest.fixture
def counted_copies(monkeypatch: pytest.MonkeyPatch) -> type[_CountedCopy]:
    monkeypatch.setattr(_CountedCopy, "started", 0)
    monkeypatch.setattr("lucid_yolo.train.non_finite_loss.HostCopy", _CountedCopy)
    return _CountedCopy


def test_guard_seals_the_flags_the_last_observation_sent(
    counted_copies: type[_CountedCopy],
) -> None:
    guard, undo = NonFiniteLossGuard("skip"), _Undo()
    guard.observe(ONE, _terms(box=NAN), send=True)  # the step's first micro-batch
    guard.observe(ONE, _terms(), send=True)
    assert counted_copies.started == 2
    guard.seal(step=5)
    assert counted_copies.started == 2  # the last micro-batch's copy, none of its own
    guard.settle(undo)
    assert (undo.calls, guard.skipped) == (1, 1)  # the first micro-batch's NaN came along


def test_guard_seal_copies_the_flags_when_none_were_sent(
    counted_copies: type[_CountedCopy],
) -> None:
    guard, undo = NonFiniteLossGuard("skip"), _Undo()
    guard.observe(ONE, _terms(cls=INF))
    assert counted_copies.started == 0
    guard.seal(step=1)
    assert counted_copies.started == 1
    guard.settle(undo)
    assert guard.skipped == 1


@pytest.mark.gpu
@pytest.mark.parametrize("send", [True, False])
def test_guard_late_check_of_sent_flags_does_not_wait_for_the_backward(send: bool) -> None:
    """Sent at the loss, the flags land before the work queued after it (the step's backward,
    here a sleeping kernel), so the next step's check returns while that work still runs;
    copied at the update, they queue behind it and the check waits for it."""
    guard, undo = NonFiniteLossGuard("skip"), _Undo()
    nan = torch.tensor(float("nan"), device="cuda")
    guard.observe(nan, {"box": nan * 0}, send=send)
    torch.cuda._sleep(2**31)  # type: ignore[no-untyped-call]  # the backward's stand-in
    backward_done = torch.cuda.Event()  # type: ignore[no-untyped-call]
    backward_done.record()
    guard.seal(step=1)
    guard.settle(undo)
    assert (undo.calls, guard.skipped) == (1, 1)
    assert backward_done.query() is not send  # type: ignore[no-untyped-call]
    torch.cuda.synchronize()
