"""``lucid-yolo info``: a registered model's layer table and totals."""

from __future__ import annotations

import pytest

from lucid_yolo.cli.main import main


def test_info_prints_the_layer_table_and_totals(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "yolo26n", "--num-classes", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("yolo26n: task detect, scale n, 5 classes\n")
    assert "backbone.stage5" in out
    assert "training:  2,505,750 parameters, 5.7 GFLOPs at 640 px" in out


def test_info_size_off_the_stride_grid_is_one_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["info", "yolo26n", "--imgsz", "600"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "lucid-yolo: error: image_size=600 is not a positive multiple of 32; the network takes "
        "square inputs whose side is a multiple of its largest stride (32)\n"
    )
