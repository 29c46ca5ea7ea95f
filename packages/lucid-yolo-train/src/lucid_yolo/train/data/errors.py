"""Typed errors for dataset files, and the fail/skip policy that decides what a bad input does.

Every parser reports a problem through a :class:`ProblemSink` instead of raising directly, so one
code path serves three callers: training with ``policy="fail"`` (raise at the first problem),
training with ``policy="skip"`` (warn once per file, drop the offending image, count at the end)
and ``check_dataset`` (collect every problem and keep going). Because the three share the path,
what a fit refuses is exactly what ``data check`` lists as an error, and what a fit warns about is
what it lists as a warning (issue 15).

Problems come in two severities: an ``error`` drops the image (or stops the fit) and a
``warning`` keeps the input as read and says how it was read (a 7-column detect row taken as a
triangle, a duplicated row). A ``config`` problem (a split without images or without any label
file) is never skippable: skipping it would leave nothing, or only background, to train on.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lucid_yolo.train.exceptions import TrainConfigError, TrainError

BadInputPolicy = Literal["fail", "skip"]
"""What a bad image or label row does: ``fail`` raises, ``skip`` warns and drops that image."""

POLICIES: tuple[BadInputPolicy, ...] = ("fail", "skip")

Severity = Literal["error", "warning"]
"""An ``error`` drops the input (or stops the fit); a ``warning`` keeps it as read."""


def path_text(path: str | os.PathLike[str]) -> str:
    """``path`` as printable text: bytes that are not UTF-8 shown as ``\\xff`` escapes.

    A file name that is not valid UTF-8 reaches Python as lone surrogates (PEP 383); printed as
    is, it raises ``UnicodeEncodeError`` on a UTF-8 terminal, so every message names files
    through this.
    """
    return os.fsencode(path).decode("utf-8", errors="backslashreplace")


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
        kind: ``"label"``, ``"image"`` or ``"config"`` (the dataset file itself or a whole
            split), so a report can group them and ``policy="fail"`` raises the matching error.
        severity: ``"error"`` (the input is dropped or the fit stops) or ``"warning"`` (the
            input is kept as read; the message says how it was read).
    """

    path: Path
    line: int | None
    message: str
    kind: Literal["label", "image", "config"] = "label"
    severity: Severity = "error"

    @property
    def location(self) -> str:
        """``path:line`` (or just ``path``), the prefix every message starts with."""
        shown = path_text(self.path)
        return f"{shown}:{self.line}" if self.line is not None else shown

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
        policy: ``"fail"`` raises an error problem's typed error at once; ``"skip"`` records it
            and warns once per file (:class:`DataWarning`). A ``config`` error raises under
            either policy; a warning problem is recorded and warned under either.
        collect_only: record every problem silently (``check_dataset``); overrides ``policy``.

    Attributes:
        problems: every problem recorded so far, in the order found.
        skipped_images: images dropped because they or their labels were bad.
    """

    policy: BadInputPolicy = "fail"
    collect_only: bool = False
    problems: list[Problem] = field(default_factory=list)
    skipped_images: int = 0
    _warned: set[tuple[Path, Severity]] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise TrainConfigError(f"policy must be one of {POLICIES}, got {self.policy!r}")

    @property
    def errors(self) -> list[Problem]:
        """The recorded problems of severity ``error``."""
        return [p for p in self.problems if p.severity == "error"]

    def report(self, problem: Problem) -> None:
        """Record ``problem``; raises its typed error where the policy says (class docstring)."""
        is_error = problem.severity == "error"
        if (
            not self.collect_only
            and is_error
            and (self.policy == "fail" or problem.kind == "config")
        ):
            raise problem.to_error()
        self.problems.append(problem)
        if not self.collect_only and (problem.path, problem.severity) not in self._warned:
            self._warned.add((problem.path, problem.severity))
            warnings.warn(
                f"skipped: {problem}" if is_error else str(problem), DataWarning, stacklevel=3
            )

    def skip_image(self) -> None:
        """Count one image dropped because of a reported problem."""
        self.skipped_images += 1

    def summarise(self, what: str) -> None:
        """Warn once with the totals, if anything was skipped (``policy="skip"`` only).

        Args:
            what: the dataset part the totals refer to, e.g. ``"split 'train' of data.yaml"``.
        """
        errors = self.errors
        if self.collect_only or not errors:
            return
        files = len({p.path for p in errors})
        warnings.warn(
            f"{what}: skipped {self.skipped_images} image(s) because of {len(errors)} "
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
    "Severity",
    "path_text",
    # errors
    "DataError",
    "DatasetConfigError",
    "ImageReadError",
    "LabelFormatError",
    "DataWarning",
]
