"""One switch for the metric's shortcuts that pay only on the host.

On the CPU, finding what cannot match costs nothing, so the metric leaves it out before
computing: padding rows, the prediction rows and target columns of an image's masks that hold no
possible pair (predictions below the confidence cut or past ``max_dets``, classes no target has),
the pixels outside the targets' bounding rectangle in the mask product, rotated boxes whose
circles do not meet; and it counts mask pixels with NumPy. Elsewhere every row, pair and pixel is
computed with the device's own operators, because finding them would make the host wait for the
device (issue 11); the caller keeps the possible pairs. The metrics are the same either way.

Every module of the metric asks :func:`taken` through this module, so that a test or a tool
(``tools/bench_metric_update.py``) can turn the shortcuts off on the CPU in one place and run the
device's path there.
"""

from __future__ import annotations

import torch


def taken(device: torch.device) -> bool:
    """Whether the metric on ``device`` takes the host's shortcuts (module docstring)."""
    return device.type == "cpu"


__all__ = ["taken"]
