"""Compound scaling of the YOLO26 family: one topology, five sizes.

Every size shares the layer graph of the nano model; a scale multiplies the block repeats by
``depth``, the channel widths by ``width`` (rounded up to a multiple of 8) after clipping them at
``max_channels``. The multipliers are the published YOLO11/YOLO26 ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Scale:
    """Depth, width and channel cap of one model size.

    Attributes:
        name: one letter, ``n``/``s``/``m``/``l``/``x``.
        depth: multiplier of block repeats (a repeat of 1 is never scaled).
        width: multiplier of channel counts.
        max_channels: cap applied to the nominal (nano-graph, ``width = 1``) channel count
            before ``width``.
        deep_blocks: every C3k2 uses nested C3k blocks (the published m/l/x models do; n/s keep
            plain bottlenecks where the topology says so).
    """

    name: str
    depth: float
    width: float
    max_channels: int
    deep_blocks: bool

    def channels(self, nominal: int) -> int:
        """Scale a nominal channel count: ``ceil(min(c, max_channels) * width / 8) * 8``."""
        return int(math.ceil(min(nominal, self.max_channels) * self.width / 8) * 8)

    def repeats(self, nominal: int) -> int:
        """Scale a nominal repeat count; a single block stays single."""
        return max(round(nominal * self.depth), 1) if nominal > 1 else nominal


SCALES: Final[dict[str, Scale]] = {
    "n": Scale("n", depth=0.50, width=0.25, max_channels=1024, deep_blocks=False),
    "s": Scale("s", depth=0.50, width=0.50, max_channels=1024, deep_blocks=False),
    "m": Scale("m", depth=0.50, width=1.00, max_channels=512, deep_blocks=True),
    "l": Scale("l", depth=1.00, width=1.00, max_channels=512, deep_blocks=True),
    "x": Scale("x", depth=1.00, width=1.50, max_channels=512, deep_blocks=True),
}


__all__ = ["SCALES", "Scale"]
