"""The distinct convolutions of a packaged YOLO26 network, as its training forward calls them.

For ``tools/probe_first_conv.py``: a first-call cost belongs to a convolution's configuration
(what cuDNN plans and compiles for), not to a layer, so the network's convolutions are recorded by
forward hooks on one CPU forward and deduplicated by configuration, each with how many times one
forward calls it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from lucid_yolo.models import create_model

KINDS = ("dense", "depthwise", "grouped", "transposed")
"""What :attr:`ConvConfig.kind` names; a probe totals its costs per kind."""


def _pair(values: Sequence[int]) -> tuple[int, int]:
    """A 2-D convolution's ``(height, width)`` setting as a tuple."""
    height, width = values
    return height, width


@dataclass(frozen=True)
class ConvConfig:
    """One convolution as the network calls it, batch left out (the probe chooses it)."""

    transposed: bool
    in_channels: int
    out_channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    output_padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    bias: bool
    height: int
    width: int
    input_requires_grad: bool
    input_dtype: str

    @classmethod
    def of(cls, conv: nn.Conv2d | nn.ConvTranspose2d, x: Tensor, images: Tensor) -> ConvConfig:
        """The configuration of ``conv`` called on ``x`` ``(B, C, H, W)`` in a forward of
        ``images``.

        The probe hands the images over in float32, which autocast casts down before the
        first convolution (a fit makes them in autocast's dtype directly:
        ``network_input_dtype``; the convolution computes in bf16 either way); every other
        convolution's input comes out of an op that CUDA's bf16 autocast runs in bf16 (a
        convolution, then BatchNorm and SiLU in their input's dtype, upsampling,
        concatenation, sums).
        """
        padding = conv.padding
        if isinstance(padding, str):
            raise ValueError(f"padding={padding!r} is not probed; give the padding in pixels")
        return cls(
            transposed=isinstance(conv, nn.ConvTranspose2d),
            in_channels=conv.in_channels,
            out_channels=conv.out_channels,
            kernel=_pair(conv.kernel_size),
            stride=_pair(conv.stride),
            padding=_pair(padding),
            output_padding=_pair(conv.output_padding),
            dilation=_pair(conv.dilation),
            groups=conv.groups,
            bias=conv.bias is not None,
            height=x.shape[2],
            width=x.shape[3],
            input_requires_grad=x.requires_grad,
            input_dtype="float32" if x is images else "bfloat16",
        )

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> ConvConfig:
        """The inverse of ``dataclasses.asdict`` after a JSON round trip (lists back to tuples)."""
        values: dict[str, Any] = {
            k: _pair(v) if isinstance(v, list) else v for k, v in fields.items()
        }
        return cls(**values)

    @property
    def kind(self) -> str:
        """``depthwise`` (a filter per input channel), ``grouped``, ``dense`` or ``transposed``."""
        if self.transposed:
            return "transposed"
        if self.groups > 1 and self.groups == self.in_channels:
            return "depthwise"
        return "grouped" if self.groups > 1 else "dense"

    def describe(self) -> str:
        """A short label, e.g. ``64→64 k3 s1 g64 on 80×80``."""
        kernel = "x".join(map(str, self.kernel)) if len(set(self.kernel)) > 1 else self.kernel[0]
        label = f"{self.in_channels}→{self.out_channels} k{kernel} s{self.stride[0]}"
        if self.groups > 1:
            label += f" g{self.groups}"
        if self.bias:
            label += " +bias"
        if self.transposed:
            label += " transposed"
        label += f" on {self.height}×{self.width}"
        notes = [] if self.input_dtype == "bfloat16" else [f"{self.input_dtype} input"]
        if not self.input_requires_grad:
            notes.append("input without grad")
        return f"{label} ({', '.join(notes)})" if notes else label

    def standalone(self, *, initialised: bool = True) -> nn.Module:
        """A fresh module of this configuration, on the CPU.

        Without ``initialised`` the weights are left as allocated (``skip_init``): no random
        numbers are drawn, for a caller beside a fit whose generators must not move.
        """
        common: dict[str, Any] = {
            "kernel_size": self.kernel,
            "stride": self.stride,
            "padding": self.padding,
            "dilation": self.dilation,
            "groups": self.groups,
            "bias": self.bias,
        }
        kind: type[nn.Conv2d | nn.ConvTranspose2d] = nn.Conv2d
        if self.transposed:
            kind, common = nn.ConvTranspose2d, {**common, "output_padding": self.output_padding}
        if initialised:
            return kind(self.in_channels, self.out_channels, **common)
        module: nn.Module = torch.nn.utils.skip_init(  # type: ignore[no-untyped-call]
            kind, self.in_channels, self.out_channels, **common
        )
        return module


def network_convs(name: str, imgsz: int, num_classes: int) -> dict[ConvConfig, int]:
    """Every distinct convolution of ``name``'s training forward at ``imgsz``, in first-call
    order, with how many times one forward calls it.

    The forward runs on the meta device: shapes only, no arithmetic, and no random numbers
    drawn (``seed=None`` on meta initialises nothing), so a caller on a thread beside a fit
    leaves the fit's generators as they were.
    """
    with torch.device("meta"):
        model = create_model(name, num_classes=num_classes, seed=None).train()
    counts: dict[ConvConfig, int] = {}

    def record(module: nn.Module, inputs: tuple[Tensor, ...], _: Tensor) -> None:
        assert isinstance(module, nn.Conv2d | nn.ConvTranspose2d)
        config = ConvConfig.of(module, inputs[0], images)
        counts[config] = counts.get(config, 0) + 1

    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d | nn.ConvTranspose2d)]
    handles = [conv.register_forward_hook(record) for conv in convs]
    # batch 2: training-mode BatchNorm refuses one value per channel at the deepest level
    images = torch.zeros(2, 3, imgsz, imgsz, device="meta")
    try:
        model(images)
    finally:
        for handle in handles:
            handle.remove()
    return counts
