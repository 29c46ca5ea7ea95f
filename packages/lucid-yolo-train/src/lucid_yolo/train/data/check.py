"""``check_dataset``: every problem of a dataset, located, in one report (the CLI's ``data check``).

Training stops at the first bad input (``policy="fail"``) or skips it with a warning; a check reads
everything and lists all problems with ``file:line``, so a user fixes a dataset in one pass. Both
read through the same parsers and :class:`ProblemSink`, so the errors a check lists are exactly
what a fit refuses, and its warnings what a fit warns about (``tests/train/data/test_corpus.py``
holds them to it). The
source decides the format: a ``.yaml``/``.yml`` is an Ultralytics dataset (all its splits), a
``.json`` a COCO annotation file (``images_dir`` required), a folder with ``images/`` and
``labelTxt/`` a DOTA set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from lucid_yolo.train.data.dataset_yaml import Task, load_dataset_yaml
from lucid_yolo.train.data.errors import DataError, Problem, ProblemSink, path_text
from lucid_yolo.train.data.formats.coco import read_coco
from lucid_yolo.train.data.formats.dota import read_dota
from lucid_yolo.train.data.formats.ultralytics import scan_split
from lucid_yolo.train.data.labels import ImageLabels


@dataclass(frozen=True)
class SplitSummary:
    """Counts for one split (or the whole set, for COCO and DOTA).

    Attributes:
        split: the split name (``"all"`` for COCO/DOTA).
        images: images read without problems.
        instances: instances in those images.
        background: those images without any instance.
        skipped: images that a problem would drop under ``policy="skip"``.
    """

    split: str
    images: int
    instances: int
    background: int
    skipped: int


@dataclass
class DatasetReport:
    """What :func:`check_dataset` found.

    Attributes:
        source: the checked YAML, json or folder.
        task: the task the labels were read for.
        splits: counts per split.
        problems: every problem, errors and warnings, in reading order.
    """

    source: Path
    task: Task
    splits: list[SplitSummary] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        """The problems a fit refuses (``policy="fail"``) or skips (``policy="skip"``)."""
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        """The problems a fit warns about and reads anyway."""
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        """No error found (warnings allowed): a fit with ``policy="fail"`` accepts the data."""
        return not self.errors

    def format(self) -> str:
        """A plain-text report: one line per split, then one line per problem, errors first."""
        lines = [f"{path_text(self.source)} ({self.task})"]
        for s in self.splits:
            lines.append(
                f"  {s.split}: {s.images} images, {s.instances} instances, "
                f"{s.background} background, {s.skipped} with problems"
            )
        if not self.problems:
            lines.append("no problems")
        lines += [f"{len(self.errors)} error(s)"] if self.errors else []
        lines += [f"  error: {p}" for p in self.errors]
        lines += [f"{len(self.warnings)} warning(s)"] if self.warnings else []
        lines += [f"  warning: {p}" for p in self.warnings]
        return "\n".join(lines)


def _summary(split: str, labels: list[ImageLabels], sink: ProblemSink) -> SplitSummary:
    return SplitSummary(
        split=split,
        images=len(labels),
        instances=sum(len(x) for x in labels),
        background=sum(len(x) == 0 for x in labels),
        skipped=sink.skipped_images,
    )


def check_dataset(
    source: str | Path,
    *,
    task: Task | None = None,
    images_dir: str | Path | None = None,
    check_images: bool = True,
    allow_unlabelled: bool = False,
) -> DatasetReport:
    """Read a whole dataset and report every problem instead of stopping at the first.

    Args:
        source: an Ultralytics dataset YAML, a COCO json, or a DOTA folder (``images/`` +
            ``labelTxt/``).
        task: the task to read labels for (default: the YAML's, ``detect`` for COCO, ``obb`` for
            DOTA).
        images_dir: COCO only: the folder ``file_name`` is relative to.
        check_images: probe every image's header.
        allow_unlabelled: accept an Ultralytics split in which no image has a label file, as
            ``YoloDataModule(allow_unlabelled=True)`` does.

    Returns:
        The report; a dataset-level problem (an unreadable YAML or json, a missing split folder)
        is reported as a problem of that file, with no split counts.

    Example:
        >>> print(check_dataset("data.yaml").format())  # doctest: +SKIP
    """
    path = Path(source).expanduser().resolve()
    report = DatasetReport(source=path, task=task or "detect")
    try:
        if path.suffix in (".yaml", ".yml"):
            spec = load_dataset_yaml(path, task=task)
            report.task = spec.task
            for split in spec.splits:
                sink = ProblemSink(collect_only=True)
                labels = scan_split(
                    spec,
                    split,
                    sink,
                    check_images=check_images,
                    allow_unlabelled=allow_unlabelled,
                )
                report.splits.append(_summary(split, labels, sink))
                report.problems += sink.problems
        elif path.suffix == ".json":
            if images_dir is None:
                raise DataError(f"{path}: a COCO check needs images_dir, the images' folder")
            sink = ProblemSink(collect_only=True)
            coco = read_coco(
                path, images_dir, task=task or "detect", check_images=check_images, sink=sink
            )
            report.splits.append(_summary("all", coco.labels, sink))
            report.problems += sink.problems
        elif (path / "labelTxt").is_dir():
            report.task = "obb"
            sink = ProblemSink(collect_only=True)
            dota = read_dota(path / "images", path / "labelTxt", names=None, sink=sink)
            report.splits.append(_summary("all", dota.labels, sink))
            report.problems += sink.problems
        else:
            raise DataError(
                f"{path}: not a dataset YAML, a COCO json or a DOTA folder (images/ + labelTxt/)"
            )
    except DataError as error:
        report.problems.append(_config_problem(path, error))
    return report


def _config_problem(path: Path, error: DataError) -> Problem:
    """``error`` as a problem of ``path``, its ``path:`` or ``path:line:`` prefix taken apart."""
    located = re.match(rf"{re.escape(path_text(path))}(?::(\d+))?: (.*)", str(error), re.S)
    if located is None:
        return Problem(path, None, str(error), kind="config")
    line = None if located[1] is None else int(located[1])
    return Problem(path, line, located[2], kind="config")


__all__ = ["DatasetReport", "SplitSummary", "check_dataset"]
