"""Images read and written through Python's file API, whatever the file name's bytes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from lucid_yolo.train.data.errors import ImageReadError
from lucid_yolo.train.data.image_file import read_image, write_image


def _non_utf8(folder: Path, name: bytes) -> Path:
    return Path(os.fsdecode(os.fsencode(folder) + b"/" + name))


# Run before ``code``: lucid_yolo.train's packages are found without running their
# ``__init__`` modules (as namespace packages are), so that importing ``image_file`` loads it and
# the few modules it imports (NumPy, OpenCV, ``errors``, ``labels``...) but not Lightning and
# torch, which ``lucid_yolo.train``'s ``__init__`` imports and the crash does not need: 0.2 s
# against 5 s of a fresh interpreter here.
_BARE_PACKAGES = """
import importlib.machinery, sys

class BarePackages:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "lucid_yolo.train" and not name.startswith("lucid_yolo.train."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.submodule_search_locations is None:
            return None
        bare = importlib.machinery.ModuleSpec(name, None, is_package=True)
        bare.submodule_search_locations = spec.submodule_search_locations
        return bare

sys.meta_path.insert(0, BarePackages())
"""


def _run(code: str, *args: bytes) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter: OpenCV segfaulted on these names (issue 15)."""
    return subprocess.run(
        [sys.executable, "-c", _BARE_PACKAGES + code, *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_read_image_same_pixels_as_imread(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    path = tmp_path / "a.jpg"
    cv2.imwrite(str(path), rng.integers(0, 255, (40, 30, 3), dtype=np.uint8))
    np.testing.assert_array_equal(read_image(path), cv2.imread(str(path), cv2.IMREAD_COLOR))


def test_read_image_missing_names_file(tmp_path: Path) -> None:
    with pytest.raises(ImageReadError, match=r"missing\.png: cannot read the image"):
        read_image(tmp_path / "missing.png")


def test_read_image_not_an_image_names_file(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(b"not an image")
    with pytest.raises(ImageReadError, match=r"a\.png: cannot decode the image"):
        read_image(tmp_path / "a.png")


def test_read_image_non_utf8_file_name(tmp_path: Path) -> None:
    path = _non_utf8(tmp_path, b"bad\xff.png")
    path.write_bytes(cv2.imencode(".png", np.zeros((20, 10, 3), np.uint8))[1].tobytes())
    code = (
        "import sys, os; from pathlib import Path;"
        "from lucid_yolo.train.data.image_file import read_image;"
        "print(read_image(Path(os.fsdecode(sys.argv[1].encode(errors='surrogateescape')))).shape)"
    )
    done = _run(code, os.fsencode(path))
    assert (done.returncode, done.stdout, done.stderr) == (0, "(20, 10, 3)\n", "")


def test_write_image_png_round_trip_is_lossless(tmp_path: Path) -> None:
    image = np.random.default_rng(0).integers(0, 255, (12, 9, 3), dtype=np.uint8)
    write_image(tmp_path / "a.png", image)
    np.testing.assert_array_equal(cv2.imread(str(tmp_path / "a.png")), image)


def test_write_image_same_bytes_as_imwrite_with_params(tmp_path: Path) -> None:
    image = np.random.default_rng(0).integers(0, 255, (12, 9, 3), dtype=np.uint8)
    params = [cv2.IMWRITE_JPEG_QUALITY, 95]
    cv2.imwrite(str(tmp_path / "expected.jpg"), image, params)
    write_image(tmp_path / "a.jpg", image, params)
    assert (tmp_path / "a.jpg").read_bytes() == (tmp_path / "expected.jpg").read_bytes()


def test_write_image_non_utf8_file_name(tmp_path: Path) -> None:
    path = _non_utf8(tmp_path, b"bad\xff.png")
    code = (
        "import sys, os; import numpy as np; from pathlib import Path;"
        "from lucid_yolo.train.data.image_file import write_image;"
        "write_image(Path(os.fsdecode(sys.argv[1].encode(errors='surrogateescape'))),"
        " np.zeros((5, 4, 3), np.uint8))"
    )
    done = _run(code, os.fsencode(path))
    assert (done.returncode, done.stderr) == (0, "")
    assert cv2.imdecode(np.frombuffer(path.read_bytes(), np.uint8), cv2.IMREAD_COLOR).shape == (
        5,
        4,
        3,
    )


def test_write_image_unknown_suffix_names_file(tmp_path: Path) -> None:
    with pytest.raises(OSError, match=r"a\.xyz: OpenCV could not encode the image as '\.xyz'"):
        write_image(tmp_path / "a.xyz", np.zeros((4, 4, 3), np.uint8))
    assert not (tmp_path / "a.xyz").exists()
