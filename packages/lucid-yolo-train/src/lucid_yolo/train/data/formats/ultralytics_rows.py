"""One Ultralytics label row, read or written, for each task.

Rows are whitespace-separated, class id first, every coordinate normalised to ``[0, 1]``:

=========  ==========================================================================
task       row
=========  ==========================================================================
detect     ``cls cx cy w h`` (a polygon row is accepted too; its hull is the box)
segment    ``cls x1 y1 x2 y2 ... xp yp`` with p >= 3 points; the box is the hull
pose       ``cls cx cy w h`` then K keypoints of D values, ``x y`` or ``x y v``
obb        ``cls x1 y1 x2 y2 x3 y3 x4 y4``, the four corners; the box is their hull
=========  ==========================================================================

A detect row with more than 4 values is a polygon (a segment label used for detection). With 6
values, 7 columns, that is a triangle, but the row is far more often a box row with two stray
values; it is read as the triangle (as Ultralytics does) and :func:`row_note` says so, so a
check warns about it.

Values in messages are printed as written in the file, or with ``:g``, never as float32 noise
(``-0.4``, not ``-0.4000000059604645``).

Keypoint visibility is 0 (not labelled), 1 (labelled, occluded) or 2 (visible). With ``D = 2`` a
keypoint at exactly ``(0, 0)`` is taken as not labelled and every other as visible. A keypoint
with visibility 0 has its ``xy`` set to 0 and is not range-checked (tools write anything there).
"""

from __future__ import annotations

import numpy as np

from lucid_yolo.train.data.dataset_yaml import Task
from lucid_yolo.train.data.errors import DatasetConfigError
from lucid_yolo.train.data.formats.geometry import LabelRows, hull_box, out_of_range
from lucid_yolo.train.data.labels import FloatArray, ImageLabels


class RowError(ValueError):
    """A row is malformed; the message says what and how to fix it (the caller adds file:line)."""


def _row_layout(task: Task, kpt_shape: tuple[int, int] | None) -> str:
    if task == "detect":
        return "`cls cx cy w h`"
    if task == "segment":
        return "`cls x1 y1 x2 y2 x3 y3 ...` (at least 3 points)"
    if task == "obb":
        return "`cls x1 y1 x2 y2 x3 y3 x4 y4`"
    k, d = kpt_shape if kpt_shape is not None else (0, 3)
    return f"`cls cx cy w h` + {k} keypoints x {d} values (kpt_shape [{k}, {d}])"


def _parse_class(token: str, num_classes: int) -> int:
    try:
        value = float(token)
    except ValueError:
        raise RowError(f"class id {token!r} is not a number; the row starts with the id") from None
    if not value.is_integer() or not 0 <= value < num_classes:
        raise RowError(
            f"class id {token!r} is out of range; expected an integer in [0, {num_classes - 1}] "
            "(fix the row or add the class to `names`)"
        )
    return int(value)


def _numbers(values: FloatArray) -> str:
    return "[" + ", ".join(f"{float(v):g}" for v in values.reshape(-1)) + "]"


def _check_range(values: FloatArray, what: str) -> None:
    bad = out_of_range(values)
    if bad is not None:
        raise RowError(
            f"{what} value {bad:g} is not finite or outside [0, 1]; rows must hold coordinates "
            "normalised by the image width and height"
        )


def _box_from_cxcywh(values: FloatArray) -> FloatArray:
    cx, cy, w, h = (float(v) for v in values)
    if not (w > 0 and h > 0):
        raise RowError(f"box size {w:g} x {h:g} is not positive; fix or remove the row")
    xyxy = np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dtype=np.float32)
    _check_range(xyxy, "box edge")
    return np.clip(xyxy, 0.0, 1.0)


def _polygon(values: FloatArray, what: str) -> FloatArray:
    points = values.reshape(-1, 2)
    _check_range(points, what)
    return np.clip(points, 0.0, 1.0)


def _keypoints(values: FloatArray, kpt_shape: tuple[int, int]) -> FloatArray:
    k, d = kpt_shape
    raw = values.reshape(k, d)
    out = np.zeros((k, 3), dtype=np.float32)
    if not np.isfinite(raw).all():
        raise RowError(f"keypoint values {_numbers(raw)} are not all finite; fix the row")
    if d == 3:
        visibility = raw[:, 2]
        if not np.isin(visibility, (0.0, 1.0, 2.0)).all():
            raise RowError(
                f"keypoint visibility {_numbers(visibility)} must be 0, 1 or 2 for each keypoint"
            )
    else:
        visibility = np.where((raw[:, 0] == 0) & (raw[:, 1] == 0), 0.0, 2.0)
    labelled = visibility > 0
    _check_range(raw[labelled, :2], "keypoint")
    out[labelled, :2] = np.clip(raw[labelled, :2], 0.0, 1.0)
    out[:, 2] = visibility
    return out


def parse_row(
    tokens: list[str],
    rows: LabelRows,
    *,
    task: Task,
    num_classes: int,
    kpt_shape: tuple[int, int] | None = None,
) -> None:
    """Parse one row and append its instance to ``rows``.

    Args:
        tokens: the row split on whitespace (non-empty).
        rows: the image's instances so far.
        task: decides the row layout (module docstring).
        num_classes: valid class ids are ``[0, num_classes)``.
        kpt_shape: pose only: ``(K, D)``.

    Raises:
        RowError: wrong column count, bad class id, non-finite or out-of-range coordinates,
            non-positive box size or bad visibility; the message quotes the value and the fix.
    """
    cls = _parse_class(tokens[0], num_classes)
    try:
        values = np.array([float(t) for t in tokens[1:]], dtype=np.float64)
    except ValueError:
        raise RowError(f"row {' '.join(tokens)!r} holds a value that is not a number") from None
    n = values.size
    polygon_row = n >= 6 and n % 2 == 0
    expected = {
        "detect": n == 4 or polygon_row,
        "segment": polygon_row,
        "obb": n == 8,
        "pose": kpt_shape is not None and n == 4 + kpt_shape[0] * kpt_shape[1],
    }[task]
    if not expected:
        raise RowError(
            f"{n + 1} columns do not fit a {task} row; expected {_row_layout(task, kpt_shape)}"
        )
    values32 = values.astype(np.float32)
    polygon = corners = keypoints = None
    if task == "segment" or (task == "detect" and n != 4):
        polygon = _polygon(values32, "polygon")
        box = hull_box(polygon)
    elif task == "obb":
        corners = values32.reshape(4, 2)
        _check_range(corners, "corner")
        box = hull_box(corners)
    else:
        box = _box_from_cxcywh(values32[:4])
        if task == "pose":
            assert kpt_shape is not None
            keypoints = _keypoints(values32[4:], kpt_shape)
    if not (box[2] > box[0] and box[3] > box[1]):
        raise RowError(
            f"the instance has no area (box xyxy {_numbers(box)}); fix or remove the row"
        )
    rows.classes.append(cls)
    rows.boxes.append(box)
    if polygon is not None:
        rows.polygons.append(polygon)
    if corners is not None:
        rows.corners.append(corners)
        rows.difficult.append(False)
    if keypoints is not None:
        rows.keypoints.append(keypoints)


def row_note(tokens: list[str], task: Task) -> str | None:
    """How a valid but suspicious row was read, for a warning; ``None`` for an ordinary row.

    Args:
        tokens: a row that :func:`parse_row` accepted.
        task: the task it was read for.
    """
    if task == "detect" and len(tokens) == 7:
        return (
            "7 columns are read as a triangle (a 3-point polygon, its hull taken as the box); "
            "a box row has 5 columns `cls cx cy w h`: drop the 2 extra values if it is a box"
        )
    return None


def _fmt(values: FloatArray) -> str:
    return " ".join(f"{float(v):.6g}" for v in values.reshape(-1))


def format_rows(labels: ImageLabels, task: Task, kpt_dims: int = 3) -> list[str]:
    """The Ultralytics rows of one image's labels (the inverse of :func:`parse_row`).

    Args:
        labels: one image's labels carrying the task's field.
        task: which row layout to write.
        kpt_dims: pose only: 2 or 3 values per keypoint.

    Returns:
        One string per instance, without newline.

    Raises:
        DatasetConfigError: ``labels`` lacks the field ``task`` needs.
    """
    lines: list[str] = []
    for i, cls in enumerate(labels.classes.tolist()):
        if task == "segment":
            if labels.polygons is None:
                raise DatasetConfigError(
                    f"{labels.source!r}: segment rows need polygons; none are set"
                )
            body = _fmt(labels.polygons[i])
        elif task == "obb":
            if labels.corners is None:
                raise DatasetConfigError(f"{labels.source!r}: obb rows need corners; none are set")
            body = _fmt(labels.corners[i])
        else:
            x1, y1, x2, y2 = (float(v) for v in labels.boxes[i])
            body = _fmt(np.array([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]))
            if task == "pose":
                if labels.keypoints is None:
                    raise DatasetConfigError(
                        f"{labels.source!r}: pose rows need keypoints; none are set"
                    )
                body += " " + _fmt(labels.keypoints[i][:, :kpt_dims])
        lines.append(f"{cls} {body}")
    return lines


__all__ = ["RowError", "format_rows", "parse_row", "row_note"]
