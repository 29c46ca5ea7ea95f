"""The last line of ``fit``: the best checkpoint's epoch and metrics, not the last epoch's."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from lucid_yolo.cli.final_report import best_epoch, final_line

HISTORY = {
    0: {"val/fitness": 0.0004, "val/box/mAP50-95": 0.0004, "val/box/mAP50": 0.002},
    1: {"val/fitness": 0.0010, "val/box/mAP50-95": 0.0010, "val/box/mAP50": 0.004},
    2: {"val/fitness": 0.0003, "val/box/mAP50-95": 0.0003, "val/box/mAP50": 0.001},
}


def _trainer(
    best_score: float | None, best_path: str = "runs/detect/fit1/checkpoints/best.ckpt"
) -> SimpleNamespace:
    callback = SimpleNamespace(
        best_model_score=None if best_score is None else torch.tensor(best_score),
        best_model_path=best_path if best_score is not None else "",
        last_model_path="runs/detect/fit1/checkpoints/last.ckpt",
    )
    return SimpleNamespace(checkpoint_callback=callback, current_epoch=3)


def test_final_line_reports_the_best_epoch_not_the_last() -> None:
    line = final_line(_trainer(0.0010), HISTORY)
    assert line == (
        "final: best epoch 1 of 0-2: box mAP50-95 0.0010 mAP50 0.0040 "
        "| checkpoint: runs/detect/fit1/checkpoints/best.ckpt"
    )


def test_final_line_without_best_reports_the_last_epoch() -> None:
    line = final_line(_trainer(None), HISTORY)
    assert line == (
        "final: last epoch 2: box mAP50-95 0.0003 mAP50 0.0010 "
        "| checkpoint: runs/detect/fit1/checkpoints/last.ckpt"
    )


def test_final_line_without_validation_says_so() -> None:
    assert final_line(_trainer(None), {}).startswith("final: no validation metrics | checkpoint: ")


def test_best_epoch_is_the_first_with_the_best_score() -> None:
    tied = {**HISTORY, 3: dict(HISTORY[1])}
    assert best_epoch(tied, float(torch.tensor(0.0010))) == 1


def test_final_line_counts_steps_skipped_for_a_non_finite_loss() -> None:
    line = final_line(_trainer(0.0010), HISTORY, skipped_steps=2)
    assert line.endswith("best.ckpt | non-finite loss: 2 step(s) skipped")


def test_final_line_says_nothing_of_skips_when_none() -> None:
    assert "non-finite" not in final_line(_trainer(0.0010), HISTORY, skipped_steps=0)
