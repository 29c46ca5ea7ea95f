"""A convolution configuration of ``tools/network_convs.py`` for the tools' tests to vary.

The tools load as modules per test (``tool_modules.load_tool``), each with its own
``ConvConfig`` class, so the caller passes the class it compares against.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def conv_config(config_class: Any, **changes: Any) -> Any:
    """A dense 8→8 3×3 stride-1 convolution on 16×16 bf16 input that takes a gradient, with
    ``changes`` applied."""
    dense = config_class(
        transposed=False,
        in_channels=8,
        out_channels=8,
        kernel=(3, 3),
        stride=(1, 1),
        padding=(1, 1),
        output_padding=(0, 0),
        dilation=(1, 1),
        groups=1,
        bias=False,
        height=16,
        width=16,
        input_requires_grad=True,
        input_dtype="bfloat16",
    )
    return dataclasses.replace(dense, **changes)
