"""COCO run-length encoded masks: the counts' two forms, decode, encode.

A COCO RLE (``{"size": [h, w], "counts": ...}``) lists alternating run lengths of 0s and 1s, the
first run being 0s (possibly of length 0), over the mask read in column-major order (down the
first column, then the next). ``counts`` is either a list of ints ("uncompressed", used by crowd
annotations) or a compact string. The string form, as the COCO API defines it, writes each count
as little-endian groups of 5 bits, one character per group (``48 + group``), with bit ``0x20``
meaning "more groups follow" and bit ``0x10`` of the last group the sign; from the fourth count on,
what is written is the difference to the count two places before (runs of the same value).

:class:`RunLengthMask` is an RLE ground truth kept as the annotation gave it (holes and all), so
that the mask metric can score against the annotation itself at the source size (issue 13).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from lucid_yolo.train.exceptions import TrainError

UInt8Mask = npt.NDArray[np.uint8]


class RleError(TrainError, ValueError):
    """An RLE is malformed (bad characters, counts that do not fill the mask)."""


@dataclass(frozen=True, eq=False)
class RunLengthMask:
    """A binary mask of a ``height × width`` image as COCO run lengths.

    Built by :meth:`from_counts`, which checks the runs, so a held mask always decodes.

    Attributes:
        height: image rows (COCO's ``size[0]``).
        width: image columns (``size[1]``).
        runs: (r,) int64 run lengths, 0s first, column-major, summing to ``height * width``.
    """

    height: int
    width: int
    runs: npt.NDArray[np.int64]

    @classmethod
    def from_counts(cls, counts: list[int] | str, height: int, width: int) -> RunLengthMask:
        """Check and hold COCO ``counts`` (a list of ints or the compact string).

        Raises:
            RleError: the counts are malformed (a bad character, a value that is not a whole
                number, a negative run) or do not add up to ``height * width``.
        """
        if isinstance(counts, str):
            runs = counts_from_string(counts)
        elif all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
            runs = list(counts)
        else:
            bad = next(c for c in counts if not isinstance(c, int) or isinstance(c, bool))
            raise RleError(f"RLE counts hold {bad!r}; uncompressed counts are whole numbers")
        if any(r < 0 for r in runs) or sum(runs) != height * width:
            raise RleError(
                f"RLE runs add up to {sum(runs)!r} pixels, the size {[height, width]!r} needs "
                f"{height * width}; the counts belong to another size"
            )
        return cls(height, width, np.asarray(runs, dtype=np.int64).reshape(-1))

    @property
    def area(self) -> int:
        """Pixels set (the sum of the odd runs), as COCO's ``area`` of an RLE."""
        return int(self.runs[1::2].sum())

    def decode(self) -> UInt8Mask:
        """(height, width) uint8 mask of 0/1."""
        values = (np.arange(self.runs.shape[0]) % 2).astype(np.uint8)
        flat = np.repeat(values, self.runs)
        mask: UInt8Mask = np.ascontiguousarray(flat.reshape(self.width, self.height).T)
        return mask

    def to_coco(self) -> dict[str, object]:
        """``{"size": [height, width], "counts": str}``, the compact form."""
        return {"size": [self.height, self.width], "counts": counts_to_string(self.runs.tolist())}


def counts_from_string(text: str) -> list[int]:
    """Decode the compact string form of RLE counts.

    Args:
        text: the ``counts`` string.

    Returns:
        The run lengths.

    Raises:
        RleError: a character outside the alphabet, a truncated count, or a negative run.
    """
    counts: list[int] = []
    value = shift = 0
    for position, char in enumerate(text):
        group = ord(char) - 48
        if not 0 <= group < 64:
            raise RleError(f"character {char!r} at {position} is not in the RLE alphabet")
        value |= (group & 0x1F) << shift
        shift += 5
        if group & 0x20:
            continue
        if group & 0x10:
            value -= 1 << shift  # sign-extend the last group
        if len(counts) > 2:
            value += counts[-2]
        if value < 0:
            raise RleError(f"run {len(counts)} decodes to {value!r} < 0")
        counts.append(value)
        value = shift = 0
    if shift:
        raise RleError(f"counts string {text[-8:]!r} ends inside a count (truncated)")
    return counts


def counts_to_string(counts: list[int]) -> str:
    """Encode RLE counts in the compact string form (the inverse of :func:`counts_from_string`)."""
    chars: list[str] = []
    for i, count in enumerate(counts):
        value = count - counts[i - 2] if i > 2 else count
        while True:
            group = value & 0x1F
            value >>= 5  # arithmetic shift: negative values tend to -1
            done = value == -1 if group & 0x10 else value == 0
            chars.append(chr(48 + (group if done else group | 0x20)))
            if done:
                break
    return "".join(chars)


def rle_decode(counts: list[int] | str, height: int, width: int) -> UInt8Mask:
    """Decode an RLE into a mask.

    Args:
        counts: run lengths, or their compact string.
        height: mask rows (``size[0]``).
        width: mask columns (``size[1]``).

    Returns:
        (height, width) uint8 mask of 0/1.

    Raises:
        RleError: the runs are malformed or do not add up to ``height * width``.
    """
    return RunLengthMask.from_counts(counts, height, width).decode()


def rle_encode(mask: npt.NDArray[np.generic]) -> dict[str, object]:
    """Encode a mask as a COCO RLE with compact string counts.

    Args:
        mask: (H, W), nonzero = inside.

    Returns:
        ``{"size": [H, W], "counts": str}``.
    """
    height, width = mask.shape
    flat = (np.asarray(mask).T.reshape(-1) != 0).astype(np.int8)
    changes = np.flatnonzero(np.diff(flat)) + 1
    edges = np.concatenate([[0], changes, [flat.size]])
    runs = np.diff(edges)
    if flat.size and flat[0] == 1:
        runs = np.concatenate([[0], runs])
    return RunLengthMask(int(height), int(width), runs.astype(np.int64)).to_coco()


__all__ = [
    "RleError",
    "RunLengthMask",
    "UInt8Mask",
    "counts_from_string",
    "counts_to_string",
    "rle_decode",
    "rle_encode",
]
