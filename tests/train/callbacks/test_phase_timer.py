"""PhaseTimer splits the CPU training step into its phases and logs them with images per second."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest

from lucid_yolo.train import YoloDataModule, YoloModule
from lucid_yolo.train.callbacks import BETWEEN_STEPS, PHASES, PhaseTimer


def _detect(tiny_dataset: Callable[[str], Path]) -> tuple[YoloDataModule, YoloModule]:
    """A tiny detect set at 64 px and a YOLO26n for it."""
    data = YoloDataModule(
        tiny_dataset("detect"), task="detect", imgsz=64, batch_size=2, workers=0, max_instances=48
    )
    return data, YoloModule("yolo26n", num_classes=data.num_classes)


def _cpu_trainer(tmp_path: Path, timer: PhaseTimer, **changes: Any) -> pl.Trainer:
    """Three CPU steps without validation, logger, checkpoints or bar, timed by ``timer``."""
    settings: dict[str, Any] = {
        "accelerator": "cpu",
        "max_steps": 3,
        "limit_val_batches": 0,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": tmp_path,
        "callbacks": [timer],
    }
    return pl.Trainer(**{**settings, **changes})


def test_phase_timer_rejects_zero_interval() -> None:
    with pytest.raises(ValueError, match="log_every_n_steps must be >= 1"):
        PhaseTimer(log_every_n_steps=0)


def test_phase_timer_marks_are_ignored_outside_a_step() -> None:
    timer = PhaseTimer()
    timer.mark("network")
    assert timer.summary() == {}


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_phase_timer_times_every_phase_of_a_fit(
    tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    data, module = _detect(tiny_dataset)
    timer = PhaseTimer(log_every_n_steps=1)
    trainer = _cpu_trainer(tmp_path, timer)
    trainer.fit(module, data)
    summary = timer.summary()
    assert sorted(summary) == sorted(PHASES)
    assert all(value >= 0.0 for value in summary.values())
    assert summary["network"] > 0.0
    assert summary["backward"] > 0.0
    assert float(trainer.callback_metrics["img_s"]) > 0.0
    assert "time/loss_ms" in trainer.callback_metrics
    # three steps in one epoch: two spans between them, logged beside the phases
    between = timer.between_steps_ms()
    assert between is not None
    assert between >= 0.0
    assert float(trainer.callback_metrics[f"time/{BETWEEN_STEPS}_ms"]) == pytest.approx(between)
    assert module.phase_marker is None  # detached again at teardown


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
def test_phase_timer_spans_between_steps_only_within_an_epoch(
    tiny_dataset: Callable[[str], Path], tmp_path: Path
) -> None:
    # one step an epoch: no two steps of an epoch, so no span between steps (validation and
    # the epoch's turnover are not a step's data path)
    data, module = _detect(tiny_dataset)
    timer = PhaseTimer(log_every_n_steps=1)
    _cpu_trainer(tmp_path, timer, max_steps=2, limit_train_batches=1).fit(module, data)
    assert timer.summary()["network"] > 0.0
    assert timer.between_steps_ms() is None


def _recorded_logs(module: YoloModule) -> tuple[list[int], list[int]]:
    """The module's global step at each log of the phase means and of the rate, as they come."""
    means_at: list[int] = []
    rate_at: list[int] = []
    log, log_dict = module.log, module.log_dict

    def recording_log(name: str, value: Any, **kwargs: Any) -> None:
        if name == "img_s":
            rate_at.append(module.global_step)
        log(name, value, **kwargs)

    def recording_log_dict(values: dict[str, Any], **kwargs: Any) -> None:
        if any(name.startswith("time/") for name in values):
            means_at.append(module.global_step)
        log_dict(values, **kwargs)

    module.log = recording_log  # type: ignore[method-assign]
    module.log_dict = recording_log_dict  # type: ignore[method-assign]
    return means_at, rate_at


@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
@pytest.mark.parametrize(
    ("changes", "rate_at_expected", "means_at_expected"),
    [
        # the rate at the timer's own interval; the means at the loggers' step (2), then the
        # epoch's (and fit's) last batch
        ({"limit_train_batches": 3}, [1, 2, 3], [2, 3]),
        # batches 2 and 3 make step 2, the logging step (the first ends before the trainer
        # counts the step); batches 0 and 1 make step 1, which no logger takes
        (
            {"max_steps": 2, "limit_train_batches": 4, "accumulate_grad_batches": 2},
            [0, 1, 1, 2],
            [1, 2],
        ),
    ],
    ids=["one-batch-a-step", "accumulation"],
)
def test_phase_means_are_logged_only_where_they_reach_the_loggers(
    tiny_dataset: Callable[[str], Path],
    tmp_path: Path,
    changes: dict[str, int],
    rate_at_expected: list[int],
    means_at_expected: list[int],
) -> None:
    data, module = _detect(tiny_dataset)
    means_at, rate_at = _recorded_logs(module)
    trainer = _cpu_trainer(
        tmp_path, PhaseTimer(log_every_n_steps=1), log_every_n_steps=2, **changes
    )
    trainer.fit(module, data)
    assert rate_at == rate_at_expected
    assert means_at == means_at_expected
