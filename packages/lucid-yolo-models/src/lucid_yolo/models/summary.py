"""Parameter and FLOP counts of a network, for training and for the exported inference model.

Conventions (chosen because they reproduce the published YOLO26 table, see
``docs/engineering/models.md``):

* FLOPs are ``2 ×`` the multiply-accumulates of convolutions, transposed convolutions, linear
  layers and the two attention products (``qᵀk`` and ``v·weights``) in one forward of a single
  image at the task's size — what :class:`torch.utils.flop_counter.FlopCounterMode` counts. Bias
  adds, BatchNorm, activations, softmax, pooling and upsampling are not counted.
* The *inference* model is the exported end-to-end one: each conv's BatchNorm folded into a bias
  (``2C`` BatchNorm parameters become ``C`` bias values) and the training-only modules
  (one-to-many head, semantic branch) removed.
* The *training* model is the module as built: every parameter, every module.

Counting runs on the ``meta`` device (shapes only), so it allocates nothing and takes
milliseconds even for ``x`` models at 1024 px.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from lucid_yolo.models.attention import Attention
from lucid_yolo.models.model import YOLO26


@dataclass(frozen=True)
class LayerRow:
    """One row of the layer table.

    Attributes:
        name: submodule path, e.g. ``backbone.stage3``.
        kind: class name of the submodule.
        params: its parameters (training count).
        gflops: its forward GFLOPs at the summary's image size.
        training_only: dropped from the exported inference model.
    """

    name: str
    kind: str
    params: int
    gflops: float
    training_only: bool


@dataclass(frozen=True)
class ModelSummary:
    """Size and cost of a network.

    Attributes:
        image_size: square input size the FLOPs are counted at.
        train_params: parameters of the module as built.
        train_gflops: forward GFLOPs of the module as built, in training mode.
        infer_params: parameters of the exported model (BatchNorm folded, training-only parts
            dropped).
        infer_gflops: forward GFLOPs of the exported model.
        layers: per-submodule rows.
    """

    image_size: int
    train_params: int
    train_gflops: float
    infer_params: int
    infer_gflops: float
    layers: tuple[LayerRow, ...]

    def format(self) -> str:
        """A fixed-width text table followed by the two total lines."""
        lines = [f"{'layer':<28} {'type':<14} {'params':>12} {'GFLOPs':>9}"]
        for row in self.layers:
            mark = " (train only)" if row.training_only else ""
            lines.append(
                f"{row.name:<28} {row.kind:<14} {row.params:>12,} {row.gflops:>9.2f}{mark}"
            )
        lines += self.totals()
        return "\n".join(lines)

    def totals(self) -> list[str]:
        """The two total lines: training (as built) and inference (as exported)."""
        return [
            f"training:  {self.train_params:,} parameters, {self.train_gflops:.1f} GFLOPs "
            f"at {self.image_size} px",
            f"inference: {self.infer_params:,} parameters, {self.infer_gflops:.1f} GFLOPs "
            f"at {self.image_size} px (BatchNorm folded, end-to-end branch only)",
        ]


def _macs(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> int:
    if isinstance(module, nn.Conv2d):
        kh, kw = module.kernel_size
        return output.numel() * (module.in_channels // module.groups) * kh * kw
    if isinstance(module, nn.ConvTranspose2d):
        kh, kw = module.kernel_size
        return inputs[0].numel() * (module.out_channels // module.groups) * kh * kw
    if isinstance(module, nn.Linear):
        return output.numel() * module.in_features
    if isinstance(module, Attention):
        B, _, H, W = output.shape
        tokens = H * W
        return B * module.num_heads * tokens * tokens * (module.key_dim + module.head_dim)
    return 0


def _folded_params(module: nn.Module) -> int:
    params = sum(p.numel() for p in module.parameters())
    folded = sum(m.num_features for m in module.modules() if isinstance(m, nn.BatchNorm2d))
    return params - folded


def _layer_rows(model: YOLO26) -> list[tuple[str, nn.Module]]:
    rows: list[tuple[str, nn.Module]] = []
    for name, child in model.backbone.named_children():
        rows.append((f"backbone.{name}", child))
    for name, child in model.neck.named_children():
        rows.append((f"neck.{name}", child))
    for group in ("o2m", "o2o"):
        for name, child in getattr(model.head, group).named_children():
            rows.append((f"head.{group}.{name}", child))
    if model.protos is not None:
        for name, child in model.protos.named_children():
            rows.append((f"protos.{name}", child))
    return rows


def model_summary(model: YOLO26, image_size: int) -> ModelSummary:
    """Count parameters and FLOPs of ``model`` for training and for export.

    Args:
        model: the network (left unchanged; a shape-only copy is measured).
        image_size: square input size in pixels (640 for the published detect/segment/pose
            tables, 1024 for OBB).

    Returns:
        The totals and a per-submodule table.
    """
    probe = copy.deepcopy(model).to("meta").train()
    macs: dict[nn.Module, int] = {}

    def hook(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
        macs[module] = macs.get(module, 0) + _macs(module, inputs, output)

    handles: list[RemovableHandle] = [
        m.register_forward_hook(hook)
        for m in probe.modules()
        if isinstance(m, nn.Conv2d | nn.ConvTranspose2d | nn.Linear | Attention)
    ]
    try:
        with torch.no_grad():
            probe(torch.empty(1, 3, image_size, image_size, device="meta"))
    finally:
        for handle in handles:
            handle.remove()

    def gflops(module: nn.Module) -> float:
        return 2 * sum(macs.get(m, 0) for m in module.modules()) / 1e9

    training_only = [m for _, m in probe.training_only_modules()]
    dropped = {id(m) for parent in training_only for m in parent.modules()}
    rows = [
        LayerRow(
            name,
            type(child).__name__,
            sum(p.numel() for p in child.parameters()),
            gflops(child),
            id(child) in dropped,
        )
        for name, child in _layer_rows(probe)
    ]
    total = gflops(probe)
    return ModelSummary(
        image_size=image_size,
        train_params=sum(p.numel() for p in probe.parameters()),
        train_gflops=total,
        infer_params=_folded_params(probe) - sum(_folded_params(m) for m in training_only),
        infer_gflops=total - sum(gflops(m) for m in training_only),
        layers=tuple(rows),
    )


__all__ = ["LayerRow", "ModelSummary", "model_summary"]
