"""The deployment page's onnxruntime example finds the boxes ``lucid-yolo predict`` writes."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lucid_yolo.cli.main import main

if TYPE_CHECKING:
    from conftest import Exported, Trained

EXAMPLE = Path(__file__).parents[2] / "docs" / "onnx_example.py"
PREDICT_WARNINGS = (
    "ignore:The '.*dataloader' does not have many workers:UserWarning",
    "ignore:`isinstance.treespec, LeafSpec.` is deprecated:FutureWarning",
)


def _same_detection(ours: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """Same class, score within 1e-4 and box corners within 0.05 px."""
    return (
        ours["class_id"] == theirs["class_id"]
        and ours["score"] == pytest.approx(theirs["score"], abs=1e-4)
        and ours["box"] == pytest.approx(theirs["box"], abs=0.05)
    )


def _run_example(monkeypatch: pytest.MonkeyPatch, *args: str) -> None:
    monkeypatch.setattr(sys, "argv", ["onnx_example.py", *args])
    runpy.run_path(str(EXAMPLE), run_name="__main__")


@pytest.mark.slow
@pytest.mark.filterwarnings(PREDICT_WARNINGS[0])
@pytest.mark.filterwarnings(PREDICT_WARNINGS[1])
def test_onnx_example_matches_predict(
    trained: Trained,
    exported: Exported,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    image = next(iter(sorted((trained.data.parent / "images" / "val").iterdir())))
    argv = ["predict", "--ckpt_path", str(trained.checkpoint), "--data.source", str(image)]
    argv += ["--data.workers", "0", "--trainer.enable_progress_bar", "false"]
    assert main([*argv, "--model.val_conf", "0.0", "--model.max_det", "10"]) == 0
    record = json.loads((tmp_path / "runs/detect/predict1" / f"{image.stem}.json").read_text())
    capsys.readouterr()

    drawn = tmp_path / "drawn.png"
    _run_example(monkeypatch, str(exported.path), str(image), "--conf", "0", "--draw", str(drawn))
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()][:5]

    assert drawn.is_file()
    assert len(found) == 5
    assert len(record["detections"]) == 10
    # a barely trained network scores many boxes within 1e-4 of each other, and ONNX Runtime and
    # torch may order such ties differently: each of the example's five must be among predict's ten
    unmatched = list(record["detections"])
    for ours in found:
        theirs = next((d for d in unmatched if _same_detection(ours, d)), None)
        assert theirs is not None, (ours, unmatched)
        unmatched.remove(theirs)


def test_onnx_example_says_when_nothing_reaches_the_threshold(
    trained: Trained,
    exported: Exported,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    image = next(iter(sorted((trained.data.parent / "images" / "val").iterdir())))
    _run_example(monkeypatch, str(exported.path), str(image), "--conf", "1.5")
    assert capsys.readouterr() == ("", "no detection with a score of 1.5 or more\n")
