"""Random affine augmentation: rotate, scale, shear, translate (YOLO-style, about the centre).

The matrix is ``M = T @ Sh @ R @ C``: ``C`` moves the input centre to the origin, ``R`` rotates by
``U(-degrees, degrees)`` and scales by ``U(1 - scale, 1 + scale)``, ``Sh`` shears x and y by
``U(-shear, shear)`` degrees each, and ``T`` moves the origin to the output centre shifted by
``U(-translate, translate)`` of the output size. With a mosaic the input is the 2x canvas and the
output the network size, so this one warp also crops the mosaic.
"""

from __future__ import annotations

import math

import numpy as np

from lucid_yolo.train.data.augment.geometry import Float64Array, KeepRule
from lucid_yolo.train.data.augment.sample import Sample
from lucid_yolo.train.data.augment.warp import warp_sample


def affine_matrix(
    in_size: tuple[int, int],
    out_size: tuple[int, int],
    *,
    degrees: float,
    scale: float,
    shear: float,
    translate: float,
    rng: np.random.Generator,
) -> Float64Array:
    """Draw a random affine map (module docstring).

    Args:
        in_size: (height, width) of the input image.
        out_size: (height, width) of the output image.
        degrees: rotation range, degrees (0 disables).
        scale: scale gain range, the factor is ``U(1 - scale, 1 + scale)``.
        shear: shear range, degrees.
        translate: translation range as a fraction of the output size.
        rng: random source.

    Returns:
        (2, 3) float64 affine from input pixels to output pixels.
    """
    in_h, in_w = in_size
    out_h, out_w = out_size
    centre = np.array([[1, 0, -in_w / 2], [0, 1, -in_h / 2], [0, 0, 1]], dtype=np.float64)
    angle = math.radians(rng.uniform(-degrees, degrees))
    factor = rng.uniform(1 - scale, 1 + scale)
    cos, sin = math.cos(angle) * factor, math.sin(angle) * factor
    rotate = np.array([[cos, -sin, 0], [sin, cos, 0], [0, 0, 1]], dtype=np.float64)
    shx = math.tan(math.radians(rng.uniform(-shear, shear)))
    shy = math.tan(math.radians(rng.uniform(-shear, shear)))
    shear_m = np.array([[1, shx, 0], [shy, 1, 0], [0, 0, 1]], dtype=np.float64)
    tx = rng.uniform(0.5 - translate, 0.5 + translate) * out_w
    ty = rng.uniform(0.5 - translate, 0.5 + translate) * out_h
    move = np.array([[1, 0, tx], [0, 1, ty], [0, 0, 1]], dtype=np.float64)
    matrix: Float64Array = (move @ shear_m @ rotate @ centre)[:2]
    return matrix


def random_affine(
    sample: Sample,
    out_size: tuple[int, int],
    *,
    degrees: float,
    scale: float,
    shear: float,
    translate: float,
    rule: KeepRule,
    rng: np.random.Generator,
) -> Sample:
    """Warp a sample by a random affine map and apply the keep rule.

    Args:
        sample: input (a letterboxed image or a mosaic canvas).
        out_size: (height, width) of the output.
        degrees: see :func:`affine_matrix`.
        scale: see :func:`affine_matrix`.
        shear: see :func:`affine_matrix`.
        translate: see :func:`affine_matrix`.
        rule: keep-rule thresholds for instances pushed out or shrunk.
        rng: random source.

    Returns:
        The warped sample (``drops`` updated).
    """
    matrix = affine_matrix(
        (sample.height, sample.width),
        out_size,
        degrees=degrees,
        scale=scale,
        shear=shear,
        translate=translate,
        rng=rng,
    )
    return warp_sample(sample, matrix, out_size, rule)


__all__ = ["affine_matrix", "random_affine"]
