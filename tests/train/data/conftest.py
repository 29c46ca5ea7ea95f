"""Shared fixtures of the data tests."""

from __future__ import annotations

import pytest

from lucid_yolo.train.data import progress


@pytest.fixture
def progress_every_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every :class:`~lucid_yolo.train.data.progress.Progress` reports at once and after each item.

    Makes a short scan behave as a long one, so a test sees its progress lines without waiting.
    """
    monkeypatch.setattr(progress, "QUIET_SECONDS", 0.0)
    monkeypatch.setattr(progress, "EVERY_SECONDS", 0.0)
