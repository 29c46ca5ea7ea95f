"""``data check`` and ``fit`` agree over a corpus of broken and unusual datasets (issue 15).

Every dataset of the corpus goes through :func:`check_dataset` and through what ``fit`` does with
data: ``YoloDataModule.setup("fit")`` and every train and val sample decoded. What the check lists
as errors, a fit with ``policy="fail"`` refuses (with the check's first error as its message) and a
fit with ``policy="skip"`` warns about; what it lists as warnings, a fit warns about too; a
dataset the check passes, a fit reads to the last sample.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest

from lucid_yolo.train.data import DataError, DataWarning, YoloDataModule
from lucid_yolo.train.data.check import DatasetReport, check_dataset
from lucid_yolo.train.data.errors import BadInputPolicy, Problem
from lucid_yolo.train.data.synthetic import generate_synthetic

Breaker = Callable[[Path], None]


def _label(root: Path, split: str = "train", index: int = 0) -> Path:
    return root / "labels" / split / f"{index:06d}.txt"


def _image(root: Path, split: str = "train", index: int = 0) -> Path:
    return root / "images" / split / f"{index:06d}.jpg"


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def _non_utf8_names(root: Path) -> None:
    for path in (_image(root), _label(root)):
        os.rename(path, os.fsencode(path.with_stem("000000")).replace(b"000000", b"00\xff00"))


def _empty_split(split: str) -> Breaker:
    def empty(root: Path) -> None:
        for image in (root / "images" / split).iterdir():
            image.unlink()

    return empty


def _errors_in_both_splits(root: Path) -> None:
    _append(_label(root), "0 0.5 0.5 0 0.1\n")
    _image(root, "val", 1).write_bytes(b"")


def _tiny_image(root: Path) -> None:
    _image(root).unlink()
    cv2.imwrite(str(root / "images" / "train" / "000000.png"), np.zeros((1, 1, 3), np.uint8))


def _grayscale(root: Path) -> None:
    _image(root).unlink()
    cv2.imwrite(str(root / "images" / "train" / "000000.png"), np.zeros((40, 50), np.uint16))


def _image_list_with_missing_image(root: Path) -> None:
    listed = [str(p) for p in sorted((root / "images" / "train").iterdir())]
    (root / "train.txt").write_text("\n".join([*listed, "images/train/gone.jpg"]) + "\n")
    data = root / "data.yaml"
    data.write_text(data.read_text().replace("train: images/train", "train: train.txt"))


CORPUS: dict[str, Breaker] = {
    "clean": lambda root: None,
    "short-row": lambda root: _append(_label(root), "0 0.5 0.5\n"),
    "class-out-of-range": lambda root: _append(_label(root), "9 0.5 0.5 0.1 0.1\n"),
    "coordinate-out-of-range": lambda root: _append(_label(root), "0 -0.4 0.5 0.1 0.1\n"),
    "not-a-number": lambda root: _append(_label(root, "val"), "0 0.5 x 0.1 0.1\n"),
    "label-not-utf8": lambda root: _label(root).write_bytes(b"0 0.5 0.5 0.1 0.1 \xff\n"),
    "empty-image": lambda root: _image(root).write_bytes(b""),
    "truncated-image": lambda root: _image(root).write_bytes(_image(root).read_bytes()[:300]),
    "text-as-image": lambda root: _image(root, "val").write_text("not an image"),
    "errors-in-both-splits": _errors_in_both_splits,
    "missing-labels-folder": lambda root: shutil.rmtree(root / "labels"),
    "missing-val-labels": lambda root: shutil.rmtree(root / "labels" / "val"),
    "empty-train-split": _empty_split("train"),
    "empty-val-split": _empty_split("val"),
    "invalid-yaml": lambda root: _append(root / "data.yaml", "  oops: [\n"),
    "missing-split-folder": lambda root: shutil.rmtree(root / "images" / "val"),
    "image-list-missing-image": _image_list_with_missing_image,
    "seven-columns": lambda root: _append(_label(root), "0 0.1 0.1 0.3 0.1 0.2 0.4\n"),
    "duplicate-row": lambda root: _append(_label(root), _label(root).read_text()),
    "tiny-image-with-boxes": _tiny_image,
    "non-utf8-file-names": _non_utf8_names,
    "crlf-rows": lambda root: _label(root).write_bytes(
        _label(root).read_bytes().replace(b"\n", b"\r\n")
    ),
    "grayscale-16-bit": _grayscale,
    "background-image": lambda root: _label(root).write_text(""),
}
"""Case name → how it breaks (or stretches) a fresh 4 + 2 image synthetic detect set."""

EXPECTED_CLEAN = {
    "clean",
    "non-utf8-file-names",
    "crlf-rows",
    "grayscale-16-bit",
    "background-image",
    "seven-columns",
    "duplicate-row",
    "tiny-image-with-boxes",
}
"""Cases a fit accepts (the last three with a warning); every other case is refused."""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Case name → the data.yaml of its broken copy."""
    made = {}
    for name, breaker in CORPUS.items():
        yaml_path = generate_synthetic(
            tmp_path_factory.mktemp(name), num_train=4, num_val=2, imgsz=64, seed=1
        )
        breaker(yaml_path.parent)
        made[name] = yaml_path
    return made


def _fit_data(yaml_path: Path, policy: BadInputPolicy) -> list[str]:
    """The DataWarnings of a fit's data path; raises what the fit would raise."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = YoloDataModule(yaml_path, imgsz=64, batch_size=2, workers=0, policy=policy)
        data.setup("fit")
        for split in ("train", "val"):
            dataset = data.datasets[split]
            for index in range(len(dataset)):
                dataset[index]
    return [str(w.message) for w in caught if issubclass(w.category, DataWarning)]


def _first_per_file(problems: list[Problem], prefix: str = "") -> list[str]:
    """What a fit warns: the first problem of each file (per severity), in reading order."""
    first: dict[Path, str] = {}
    for problem in problems:
        first.setdefault(problem.path, f"{prefix}{problem}")
    return list(first.values())


def _check(yaml_path: Path) -> DatasetReport:
    report = check_dataset(yaml_path)
    report.format().encode("utf-8")  # printable as is on a UTF-8 terminal
    return report


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_fit_with_fail_policy_refuses_exactly_what_check_reports(
    corpus: dict[str, Path], case: str
) -> None:
    report = _check(corpus[case])
    assert report.ok == (case in EXPECTED_CLEAN), report.format()
    if report.ok:
        assert _fit_data(corpus[case], "fail") == _first_per_file(report.warnings)
    else:
        with pytest.raises(DataError) as refused:
            _fit_data(corpus[case], "fail")
        assert str(refused.value) == str(report.errors[0])


@pytest.mark.parametrize("case", sorted(set(CORPUS) - EXPECTED_CLEAN))
def test_fit_with_skip_policy_warns_about_every_file_check_reports(
    corpus: dict[str, Path], case: str
) -> None:
    report = _check(corpus[case])
    config_errors = [p for p in report.errors if p.kind == "config"]
    if config_errors:
        with pytest.raises(DataError, match=f"^{re.escape(str(config_errors[0]))}$"):
            _fit_data(corpus[case], "skip")
        return
    skipped = [m for m in _fit_data(corpus[case], "skip") if m.startswith("skipped: ")]
    assert skipped == _first_per_file(report.errors, "skipped: ")


def test_check_reports_every_error_at_once(corpus: dict[str, Path]) -> None:
    report = _check(corpus["errors-in-both-splits"])
    rows = len(_label(corpus["errors-in-both-splits"].parent).read_text().splitlines())
    assert [p.location.rsplit("/", 2)[-2:] for p in report.errors] == [
        ["train", f"000000.txt:{rows}"],
        ["val", "000001.jpg"],
    ]


def test_check_quotes_coordinates_as_written(corpus: dict[str, Path]) -> None:
    (error,) = _check(corpus["coordinate-out-of-range"]).errors
    assert "box edge value -0.45 is not finite or outside [0, 1]" in error.message
