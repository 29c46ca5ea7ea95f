"""The trainer's lines for the user: stdout, flushed, once per run under DDP."""

from __future__ import annotations

import pytest
from lightning.pytorch.utilities import rank_zero_only

from lucid_yolo.train.console import print_line


def test_print_line_writes_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    print_line("data: val: 3 images")
    assert capsys.readouterr() == ("data: val: 3 images\n", "")


def test_print_line_is_silent_off_rank_zero(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    print_line("data: val: 3 images")
    assert capsys.readouterr().out == ""
