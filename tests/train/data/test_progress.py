"""Progress lines of long data work: silent when quick, then count, elapsed and time left."""

from __future__ import annotations

import pytest

from lucid_yolo.train.data.progress import Progress


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_is_silent_for_quick_work() -> None:
    clock, lines = _Clock(), []
    progress = Progress("data: train: caching images", 10, clock=clock, emit=lines.append)
    for _ in range(10):
        clock.now += 0.1
        progress.advance()
    assert lines == []


def test_progress_reports_count_elapsed_and_estimate() -> None:
    clock, lines = _Clock(), []
    progress = Progress(
        "data: train: caching images", 1000, every=5.0, after=2.0, clock=clock, emit=lines.append
    )
    for _ in range(400):
        clock.now += 0.01
        progress.advance()
    assert lines == ["data: train: caching images: 200/1,000, 0:02 elapsed, about 0:08 left"]
    clock.now += 5.0
    progress.advance()
    assert lines[-1] == "data: train: caching images: 401/1,000, 0:09 elapsed, about 0:13 left"


def test_progress_says_nothing_when_the_work_is_done() -> None:
    clock, lines = _Clock(), []
    progress = Progress("x", 2, after=0.0, clock=clock, emit=lines.append)
    clock.now += 10.0
    progress.advance(2)
    assert lines == []


def test_progress_track_counts_an_item_when_the_loop_moves_on() -> None:
    clock, lines = _Clock(), []
    progress = Progress("x", 3, every=0.0, after=0.0, clock=clock, emit=lines.append)
    seen = []
    for item in progress.track("abc"):
        seen.append((item, progress.done))
        clock.now += 1.0
    assert seen == [("a", 0), ("b", 1), ("c", 2)]
    assert lines == [
        "x: 1/3, 0:01 elapsed, about 0:02 left",
        "x: 2/3, 0:02 elapsed, about 0:01 left",
    ]


@pytest.mark.usefixtures("progress_every_item")
def test_progress_defaults_are_read_when_it_starts() -> None:
    clock, lines = _Clock(), []
    progress = Progress("x", 3, clock=clock, emit=lines.append)
    progress.advance()
    progress.advance()
    assert len(lines) == 2
