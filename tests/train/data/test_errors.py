"""The fail/skip/collect policy of ProblemSink and the typed error each problem raises."""

from __future__ import annotations

from pathlib import Path

import pytest

from lucid_yolo.train.data.errors import (
    DatasetConfigError,
    DataWarning,
    ImageReadError,
    LabelFormatError,
    Problem,
    ProblemSink,
)


def test_problem_sink_fail_raises_typed_error_with_location() -> None:
    with pytest.raises(ImageReadError, match=r"^x\.jpg: broken$"):
        ProblemSink().report(Problem(Path("x.jpg"), None, "broken", kind="image"))


@pytest.mark.parametrize(
    ("kind", "error"),
    [("label", LabelFormatError), ("image", ImageReadError), ("config", DatasetConfigError)],
)
def test_problem_to_error_matches_kind(kind: str, error: type[Exception]) -> None:
    problem = Problem(Path("a.txt"), 3, "bad", kind=kind)  # type: ignore[arg-type]
    assert isinstance(problem.to_error(), error)
    assert str(problem.to_error()) == "a.txt:3: bad"


def test_problem_sink_skip_warns_once_per_file() -> None:
    sink = ProblemSink(policy="skip")
    problems = [
        Problem(Path("a.txt"), 1, "one"),
        Problem(Path("a.txt"), 2, "two"),
        Problem(Path("b.txt"), 1, "three"),
    ]
    with pytest.warns(DataWarning) as record:
        list(map(sink.report, problems))
    assert [str(w.message) for w in record] == ["skipped: a.txt:1: one", "skipped: b.txt:1: three"]
    assert len(sink.problems) == 3


def test_problem_sink_collect_only_is_silent(recwarn: pytest.WarningsRecorder) -> None:
    sink = ProblemSink(collect_only=True)
    sink.report(Problem(Path("a.txt"), 1, "one"))
    sink.skip_image()
    sink.summarise("x")
    assert len(sink.problems) == 1
    assert len(recwarn) == 0


def test_problem_sink_rejects_unknown_policy() -> None:
    with pytest.raises(ValueError, match=r"policy must be one of \('fail', 'skip'\), got 'drop'"):
        ProblemSink(policy="drop")  # type: ignore[arg-type]
