"""Target rows per training image: as asked, or the most instances a training sample can hold."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lucid_yolo.train import YoloDataModule
from lucid_yolo.train.data.augment import AugmentConfig
from lucid_yolo.train.data.augment.pipeline import instance_factors
from lucid_yolo.train.data.target_rows import AUTO_MAX_ROWS, choose_target_rows


def test_rows_asked_for_are_kept() -> None:
    assert choose_target_rows(7, 50, AugmentConfig(), "detect").rows == 7
    assert choose_target_rows(7, 50, AugmentConfig(), "detect").reason == "as asked"


@pytest.mark.parametrize(
    ("augment", "task", "rows"),
    [
        (AugmentConfig(), "detect", 24),  # the 4 mosaic tiles may be one image 4 times
        (AugmentConfig(mosaic=0.0), "detect", 6),
        (AugmentConfig(mixup=0.1), "detect", 48),  # mixup joins two mosaics
        (AugmentConfig(copy_paste=0.1), "detect", 24),  # copy-paste copies segment instances only
        (AugmentConfig(copy_paste=0.1), "segment", 48),
        (AugmentConfig(mixup=0.1, copy_paste=0.1), "segment", 96),
    ],
)
def test_auto_rows_multiply_the_largest_image_by_each_step_that_adds_instances(
    augment: AugmentConfig, task: Any, rows: int
) -> None:
    choice = choose_target_rows(None, 6, augment, task)
    assert choice.rows == rows
    assert choice.reason.startswith("the most a sample can hold: 6 in the largest image")
    assert choice.reason.count(" x") == len(instance_factors(augment, segment=task == "segment"))


def test_auto_rows_stop_at_the_earlier_fixed_default() -> None:
    choice = choose_target_rows(None, 30, AugmentConfig(), "detect")
    assert choice.rows == AUTO_MAX_ROWS == 100
    assert "a sample can hold 30 in the largest image x4 (mosaic) = 120" in choice.reason
    assert "set max_instances to keep more" in choice.reason


def test_auto_rows_of_a_split_without_instances_are_one() -> None:
    assert choose_target_rows(None, 0, AugmentConfig(), "detect").rows == 1


@pytest.mark.parametrize(
    ("augment", "rows"),
    [(AugmentConfig(), 24), (AugmentConfig(mixup=1.0, copy_paste=1.0), 96)],
    ids=["defaults", "mixup+copy-paste"],
)
def test_no_training_sample_holds_more_instances_than_the_auto_rows(
    tiny_dataset: Callable[[str], Path], augment: AugmentConfig, rows: int
) -> None:
    """The tiny set's largest image holds 6 instances. Over four epochs some samples hold more
    than half the rows, so a bound missing one of its factors would cut instances here."""
    data = YoloDataModule(
        tiny_dataset("segment"), task="segment", imgsz=128, batch_size=2, workers=0, augment=augment
    )
    data.setup("fit")
    dataset = data.datasets["train"]
    assert dataset.max_instances == rows
    held = []
    for epoch in range(4):
        data.set_epoch(epoch)
        held += [int(dataset[i].valid.sum()) for i in range(len(dataset))]
    assert rows / 2 < max(held) <= rows
    assert data.data_stats()["overflow"] == 0


@pytest.mark.slow
def test_fit_with_the_auto_rows_is_bitwise_the_fit_with_100(
    tiny_dataset: Callable[[str], Path], fit_digests: Callable[..., Any]
) -> None:
    """Padded rows are masked out of every loss term, so fewer of them change no bit
    (tools/max_instances_parity.py runs the four tasks)."""
    yaml = tiny_dataset("segment")
    cpu = {"accelerator": "cpu", "imgsz": 64, "max_steps": 2}
    auto = fit_digests(yaml, "segment", "32-true", 1, max_instances=None, **cpu)
    hundred = fit_digests(yaml, "segment", "32-true", 1, max_instances=100, **cpu)
    assert auto.digests == hundred.digests
    assert auto.losses == hundred.losses
