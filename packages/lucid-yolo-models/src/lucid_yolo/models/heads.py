"""Dual prediction heads: one-to-many (dense training signal) and one-to-one (end-to-end).

Each head is a set of named :class:`Branch` es (box, cls, and per task mask coefficients,
keypoints or angle). A branch runs a small conv trunk on each level and ends in one 1×1 conv per
named output, so a trunk can feed several outputs (pose: keypoints and their scales). One conv per
output, not one conv split by rows, is the reference's layout: on CUDA a conv of another width may
run another kernel, and imported pose weights then gave outputs differing in the last bits.
Outputs are flattened over the levels into ``(B, C, A)`` and keyed as in
:mod:`lucid_yolo.models.outputs`.

The one-to-one branch set is a copy of the one-to-many set (identical at initialisation) and
reads *detached* features: its loss then trains only its own convs, while backbone and neck learn
from the dense one-to-many signal alone. This follows the consistent dual assignment of YOLOv10
(Wang et al. 2024) that YOLO26 inherits; it keeps the sparse one-to-one targets from disturbing
the shared features.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from lucid_yolo.models import outputs as keys
from lucid_yolo.models.conv import ConvBnAct, depthwise
from lucid_yolo.models.weight_casts import CastConv2d

NOMINAL_IMAGE_SIZE = 640
"""Image size assumed by the classifier bias prior."""


class Branch(nn.Module):
    """A per-level conv trunk and one 1×1 output conv per named output.

    Args:
        trunks: one trunk per level, mapping that level's features to ``trunk_channels``.
        trunk_channels: channels the trunks produce.
        outputs: ``(name, channels)`` of each output.
        bias_priors: initial output bias per level, by output name (others keep the default
            initialisation).
    """

    def __init__(
        self,
        trunks: Sequence[nn.Module],
        trunk_channels: int,
        outputs: Sequence[tuple[str, int]],
        bias_priors: Mapping[str, Sequence[float]] | None = None,
    ) -> None:
        super().__init__()
        self.names = tuple(name for name, _ in outputs)
        self.sizes = tuple(size for _, size in outputs)
        convs = [
            {name: CastConv2d(trunk_channels, size, 1) for name, size in outputs} for _ in trunks
        ]
        with torch.no_grad():
            for name, values in (bias_priors or {}).items():
                for level, value in zip(convs, values, strict=True):
                    bias = level[name].bias
                    assert bias is not None
                    bias.fill_(value)
        self.trunk = nn.ModuleList(trunks)
        self.out = nn.ModuleList(nn.ModuleDict(level) for level in convs)

    def forward(self, features: Sequence[Tensor]) -> dict[str, Tensor]:
        """Levels ``(B, c_l, H_l, W_l)`` → ``{name: (B, channels, A)}``, ``A = Σ H_l W_l``."""
        flat: dict[str, list[Tensor]] = {name: [] for name in self.names}
        for trunk, out, x in zip(self.trunk, self.out, features, strict=True):
            hidden = trunk(x)
            assert isinstance(out, nn.ModuleDict)
            for name in self.names:
                flat[name].append(out[name](hidden).flatten(2))  # (B, channels, H_l W_l)
        return {name: torch.cat(levels, dim=2) for name, levels in flat.items()}


def _two_convs(in_channels: int, channels: int) -> nn.Module:
    return nn.Sequential(ConvBnAct(in_channels, channels, 3), ConvBnAct(channels, channels, 3))


def box_branch(in_channels: Sequence[int]) -> Branch:
    """Four edge distances per cell; no distribution bins (no DFL), so 4 channels. The bias
    starts every side at one stride, a box of 2×2 cells."""
    hidden = max(16, in_channels[0] // 4)
    trunks = [_two_convs(c, hidden) for c in in_channels]
    return Branch(trunks, hidden, [(keys.BOX, 4)], {keys.BOX: [1.0] * len(in_channels)})


def cls_branch(in_channels: Sequence[int], num_classes: int, strides: Sequence[int]) -> Branch:
    """Class logits through a light depthwise-separable trunk.

    The bias prior makes the initial class probability about 5 objects per 640² image spread
    over the cells of each level, so the first steps are not swamped by easy negatives (the
    focal-loss prior of Lin et al. 2017).
    """
    hidden = max(in_channels[0], min(num_classes, 100))
    trunks = [
        nn.Sequential(
            depthwise(c),
            ConvBnAct(c, hidden),
            depthwise(hidden),
            ConvBnAct(hidden, hidden),
        )
        for c in in_channels
    ]
    prior = [math.log(5 / num_classes / (NOMINAL_IMAGE_SIZE / s) ** 2) for s in strides]
    return Branch(trunks, hidden, [(keys.CLS, num_classes)], {keys.CLS: prior})


def extra_branch(in_channels: Sequence[int], outputs: Sequence[tuple[str, int]]) -> Branch:
    """A task branch (mask coefficients, keypoints, angle): two 3×3 convs and a 1×1 output."""
    hidden = max(in_channels[0] // 4, sum(size for _, size in outputs))
    return Branch([_two_convs(c, hidden) for c in in_channels], hidden, outputs)


class DualHead(nn.Module):
    """One-to-many and one-to-one copies of the same branches.

    Args:
        branches: the one-to-many branches by name; the one-to-one set is a deep copy.
    """

    def __init__(self, branches: dict[str, Branch]) -> None:
        super().__init__()
        self.o2m = nn.ModuleDict(branches)
        self.o2o = copy.deepcopy(self.o2m)

    def forward(self, features: Sequence[Tensor]) -> dict[str, Tensor]:
        """Neck maps → ``{"o2m.<name>": (B, c, A), "o2o.<name>": (B, c, A)}``."""
        result = self._run(keys.O2M, self.o2m, features)
        result.update(self.forward_o2o([x.detach() for x in features]))
        return result

    def forward_o2o(self, features: Sequence[Tensor]) -> dict[str, Tensor]:
        """The one-to-one branches alone (the deployed path): ``{"o2o.<name>": (B, c, A)}``."""
        return self._run(keys.O2O, self.o2o, features)

    @staticmethod
    def _run(prefix: str, group: nn.ModuleDict, features: Sequence[Tensor]) -> dict[str, Tensor]:
        result: dict[str, Tensor] = {}
        for branch in group.values():
            for name, tensor in branch(features).items():
                result[keys.branch_key(prefix, name)] = tensor
        return result


__all__ = [
    "NOMINAL_IMAGE_SIZE",
    "Branch",
    "DualHead",
    "box_branch",
    "cls_branch",
    "extra_branch",
]
