"""Typed errors for dataset files, and the fail/skip policy that decides what a bad input does.

Every parser reports a problem through a :class:`ProblemSink` instead of raising directly, so one
code path serves three callers: training with ``policy="fail"`` (raise at the first problem),
training with ``policy="skip"`` (warn once per file, drop the offending image, count at the end)
and ``check_dataset`` (collect every problem and keep going).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lucid_yolo.train.exceptions import TrainConfigError, TrainError

BadInputPolicy = Literal["fail", "skip"]
"""What a bad image or label row does: ``fail`` raises, ``skip`` warns and drops that image."""

POLICIES: tuple[BadInputPolicy, ...] = ("fail", "skip")


class DataError(TrainError):
    """Base class of every dataset error; messages name the file (and line) and the fix."""


class DatasetConfigError(DataError):
    """The dataset YAML (or a split path it names) is missing, malformed or inconsistent."""


class LabelFormatError(DataError):
    """A label row or annotation has the wrong shape, a bad class id or bad coordinates."""


class ImageReadError(DataError):
    """An image file is missing, empty, truncated or not an image format we can read."""


class DataWarning(UserWarning):
    """A bad input was skipped under ``policy="skip"``; one warning per file, then a summary."""


@dataclass(frozen=True)
class Problem:
    """One bad input, located.

    Attributes:
        path: the file at fault (label file, image or annotation json).
        line: 1-based line in ``path``, or ``None`` when the whole file is at fault.
        message: what is wrong, quoting the bad value, and the fix.
        kind: ``"label"``, ``"image"`` or ``"config"`` (the dataset file itself), so a report
            can group them and ``policy="fail"`` raises the matching error.
    """

    path: Path
    line: int | None
    message: str
    kind: Literal["label", "image", "config"] = "label"

    @property
    def location(self) -> str:
        """``path:line`` (or just ``path``), the prefix every message starts with."""
        return f"{self.path}:{self.line}" if self.line is not None else str(self.path)

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"

    def to_error(self) -> DataError:
        """The typed exception that ``policy="fail"`` raises for this problem."""
        errors = {
            "label": LabelFormatError,
            "image": ImageReadError,
            "config": DatasetConfigError,
        }
        return errors[self.kind](str(self))


@dataclass
class ProblemSink:
    """Receives problems from the parsers and applies the policy.

    Args:
        policy: ``"fail"`` raises the problem's typed error at once; ``"skip"`` records it and
            warns once per file (:class:`DataWarning`).
        collect_only: record every problem silently (``check_dataset``); overrides ``policy``.

    Attributes:
        problems: every problem recorded so far, in the order found.
        skipped_images: images dropped because they or their labels were bad.
    """

    policy: BadInputPolicy = "fail"
    collect_only: bool = False
    problems: list[Problem] = field(default_factory=list)
    skipped_images: int = 0
    _warned: set[Path] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise TrainConfigError(f"policy must be one of {POLICIES}, got {self.policy!r}")

    def report(self, problem: Problem) -> None:
        """Record ``problem``; raises its typed error under ``policy="fail"``."""
        if not self.collect_only and self.policy == "fail":
            raise problem.to_error()
        self.problems.append(problem)
        if not self.collect_only and problem.path not in self._warned:
            self._warned.add(problem.path)
            warnings.warn(f"skipped: {problem}", DataWarning, stacklevel=3)

    def skip_image(self) -> None:
        """Count one image dropped because of a reported problem."""
        self.skipped_images += 1

    def summarise(self, what: str) -> None:
        """Warn once with the totals, if anything was skipped (``policy="skip"`` only).

        Args:
            what: the dataset part the totals refer to, e.g. ``"split 'train' of data.yaml"``.
        """
        if self.collect_only or not self.problems:
            return
        files = len({p.path for p in self.problems})
        warnings.warn(
            f"{what}: skipped {self.skipped_images} image(s) because of {len(self.problems)} "
            f"problem(s) in {files} file(s); run `lucid-yolo data check` to list them all, "
            "or use policy='fail' to stop at the first",
            DataWarning,
            stacklevel=2,
        )


__all__ = [
    # policy
    "BadInputPolicy",
    "POLICIES",
    "Problem",
    "ProblemSink",
    # errors
    "DataError",
    "DatasetConfigError",
    "ImageReadError",
    "LabelFormatError",
    "DataWarning",
]
