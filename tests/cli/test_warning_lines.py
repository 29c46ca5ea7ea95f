"""Our warnings as one ``lucid-yolo: warning:`` line; everyone else's in Python's format."""

from __future__ import annotations

import warnings

import pytest

from lucid_yolo.cli.warning_lines import warning_lines
from lucid_yolo.train.data.errors import DataWarning


def test_warning_lines_prints_data_warning_as_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings(), warning_lines():
        warnings.simplefilter("always")
        warnings.warn("skipped: a.txt:3: bad row", DataWarning, stacklevel=1)
    assert capsys.readouterr().err == "lucid-yolo: warning: skipped: a.txt:3: bad row\n"


def test_warning_lines_passes_other_warnings_to_python_format(
    capsys: pytest.CaptureFixture[str],
) -> None:
    passed: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *_: passed.append(str(message))
        with warning_lines():
            warnings.warn("not ours", UserWarning, stacklevel=1)
    assert passed == ["not ours"]
    assert capsys.readouterr().err == ""


def test_warning_lines_restores_showwarning() -> None:
    before = warnings.showwarning
    with warning_lines():
        assert warnings.showwarning is not before
    assert warnings.showwarning is before
