"""The synthetic dataset's classes and the exact geometry of one drawn shape.

A class is a (shape, colour) pair: both the outline and the colour identify it, so a detector can
learn the classes from few images. Every instance is the class's unit outline stretched along
its own x axis by ``aspect``, rotated by ``angle`` and scaled by ``radius`` around ``centre``;
every label (box, polygon, keypoints, oriented box) is computed from that same outline, so labels
and drawn pixels agree to the rasteriser's sub-pixel precision.

Keypoints (pose, K = 5, ``flip_idx = [0, 3, 2, 1, 4]``): the outline's topmost, rightmost,
bottommost and leftmost points in the image (a tie, e.g. the flat top edge of an upright square,
is the middle of the tied vertices), then the shape's centre. They are defined by what is visible,
whatever the shape's symmetry, and a left-right flip swaps exactly "rightmost" and "leftmost".

Oriented box (OBB): the outline's bounding rectangle in the shape's own (stretched, unrotated)
frame, rotated with the shape; corners in the order (−x, −y), (+x, −y), (+x, +y), (−x, +y) of that
frame, which is clockwise on screen (y points down).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lucid_yolo.train.data.labels import FloatArray


def _regular(n: int, start_deg: float, radii: tuple[float, ...] = (1.0,)) -> FloatArray:
    angles = np.deg2rad(start_deg + np.arange(n) * 360.0 / n)
    r = np.resize(np.asarray(radii, dtype=np.float64), n)
    return np.stack([r * np.cos(angles), r * np.sin(angles)], axis=1).astype(np.float32)


@dataclass(frozen=True)
class ShapeClass:
    """One synthetic class.

    Attributes:
        name: the class name written to ``names``.
        colour: fill colour, ``(B, G, R)`` uint8 (OpenCV order), saturated so it stands out from
            the grey background.
        outline: (p, 2) float32 unit outline around the origin (max radius 1), screen axes.
    """

    name: str
    colour: tuple[int, int, int]
    outline: FloatArray


SHAPE_CLASSES: tuple[ShapeClass, ...] = (
    ShapeClass("circle", (40, 40, 220), _regular(48, 0.0)),
    ShapeClass("square", (40, 200, 40), _regular(4, 45.0)),
    ShapeClass("triangle", (220, 60, 40), _regular(3, -90.0)),
    ShapeClass("star", (30, 210, 230), _regular(10, -90.0, (1.0, 0.45))),
    ShapeClass("hexagon", (210, 40, 210), _regular(6, 0.0)),
)
"""The classes, index = class id: red circle, green square, blue triangle, yellow star, magenta
hexagon."""

NUM_KEYPOINTS = 5
KEYPOINT_NAMES: tuple[str, ...] = ("top", "right", "bottom", "left", "centre")
FLIP_IDX: tuple[int, ...] = (0, 3, 2, 1, 4)


@dataclass(frozen=True)
class ShapeInstance:
    """One placed shape, in pixels of its image.

    Attributes:
        cls: index into :data:`SHAPE_CLASSES`.
        centre: ``(x, y)`` pixels.
        radius: pixels; the outline's farthest point before stretching is this far from the centre.
        angle: radians, counter-clockwise on screen is negative (OpenCV's y-down axes).
        aspect: stretch of the outline along its own x axis (1 = as designed).
    """

    cls: int
    centre: tuple[float, float]
    radius: float
    angle: float
    aspect: float

    @property
    def extent(self) -> float:
        """Radius of a circle around the centre that contains the whole shape, pixels."""
        return self.radius * max(self.aspect, 1.0)

    def _to_image(self, local: FloatArray) -> FloatArray:
        c, s = np.cos(self.angle), np.sin(self.angle)
        rotation = np.array([[c, -s], [s, c]])
        scaled = local.astype(np.float64) * np.array([self.aspect, 1.0]) * self.radius
        points: FloatArray = (scaled @ rotation.T + np.asarray(self.centre)).astype(np.float32)
        return points

    def polygon(self) -> FloatArray:
        """(p, 2) float32 outline vertices, ``xy`` pixels, the polygon that is drawn."""
        return self._to_image(SHAPE_CLASSES[self.cls].outline)

    def corners(self) -> FloatArray:
        """(4, 2) float32 oriented-box corners, ``xy`` pixels (order in the module docstring)."""
        outline = SHAPE_CLASSES[self.cls].outline
        (x0, y0), (x1, y1) = outline.min(axis=0), outline.max(axis=0)
        local = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=np.float32)
        return self._to_image(local)

    def keypoints(self) -> FloatArray:
        """(5, 3) float32 keypoints ``x, y, visibility`` pixels (module docstring); all visible."""
        points = self.polygon().astype(np.float64)
        out = np.zeros((NUM_KEYPOINTS, 3), dtype=np.float32)
        for k, (axis, sign) in enumerate(((1, -1.0), (0, 1.0), (1, 1.0), (0, -1.0))):
            key = points[:, axis] * sign
            tied = points[key >= key.max() - 0.5]
            out[k, :2] = tied.mean(axis=0)
        out[4, :2] = self.centre
        out[:, 2] = 2.0
        return out


__all__ = [
    "FLIP_IDX",
    "KEYPOINT_NAMES",
    "NUM_KEYPOINTS",
    "SHAPE_CLASSES",
    "ShapeClass",
    "ShapeInstance",
]
