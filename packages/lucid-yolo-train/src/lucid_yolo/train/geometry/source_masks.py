"""Ground-truth instance masks at the source image's size, from the annotation's own shape.

COCO scores a mask against its annotation at the image's size: a polygon rasterised there, an RLE
decoded there. An instance reaches the evaluator as one of the two (:data:`SourceShape`): a
polygon in source pixels (rasterised by the pixel-centre rule of :mod:`.polygon_masks`) or a
:class:`~.run_length.RunLengthMask`, decoded as given, holes included.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from lucid_yolo.train.geometry.polygon_masks import polygon_mask
from lucid_yolo.train.geometry.run_length import RleError, RunLengthMask

SourceShape = npt.NDArray[np.float64] | RunLengthMask
"""One instance's ground truth: a (p, 2) ``xy`` polygon in source pixels, or its RLE."""


def source_masks(
    shapes: Sequence[SourceShape],
    height: int,
    width: int,
    device: torch.device | str | None = None,
) -> Tensor:
    """Each instance's mask at the source size, stacked.

    Args:
        shapes: n polygons ((p_i, 2) ``xy`` source pixels) or RLEs of a ``height × width`` image.
        height: image rows.
        width: image columns.
        device: where the result lives.

    Returns:
        (n, height, width) bool.

    Raises:
        RleError: an RLE of another size than the image.
    """
    masks = np.zeros((len(shapes), height, width), dtype=np.bool_)
    for i, shape in enumerate(shapes):
        if not isinstance(shape, RunLengthMask):
            masks[i] = polygon_mask(shape, height, width)
            continue
        if (shape.height, shape.width) != (height, width):
            raise RleError(
                f"an RLE of size {[shape.height, shape.width]!r} labels an image of "
                f"{[height, width]!r}: the json's width/height differ from the image's; fix them "
                "(read_coco with check_images=True finds every such image)"
            )
        masks[i] = shape.decode() != 0
    return torch.from_numpy(masks).to(device)


__all__ = ["SourceShape", "source_masks"]
