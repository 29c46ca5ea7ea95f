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

Counting runs one forward of the network with its weights swapped for CPU zeros
(:func:`torch.func.functional_call`) at the smallest size the net takes, one cell at the coarsest
stride (32 px), and scales each layer's count to the asked size: every side of every feature map
is proportional to the input side when that is a multiple of the largest stride, so a
convolution's count grows with the square of the scale and an attention product's (cells × cells)
with its fourth power. That is exact (a test checks it against a full-size count for every task)
and about ten times quicker than a full-size forward on the ``meta`` device, whose per-operator
cost, not the image size, dominated ``fit``'s start-up (``docs/engineering/whole-fit-speed.md``,
start-up). The swap replaced a deep copy of the module tree, three quarters of the summary's time
(YOLO26n on the dev CPU: 0.30-0.38 s with the copy, 0.09-0.11 s with the swap): the counts need
shapes only, the network stays on its device, and training-mode BatchNorm updates the swapped-in
zeros, not the network's statistics.

The forward runs on one CPU thread (:mod:`lucid_yolo.models.cpu_threads`): in ``fit`` it meets
the loader's worker processes, which are decoding the first batches on every core by then.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.utils.hooks import RemovableHandle

from lucid_yolo.models.attention import Attention
from lucid_yolo.models.cpu_threads import one_cpu_thread
from lucid_yolo.models.exceptions import ModelConfigError
from lucid_yolo.models.model import YOLO26

_COUNTED = (nn.Conv2d, nn.ConvTranspose2d, nn.Linear, Attention)
"""The layers whose multiply-accumulates are counted (module docstring)."""


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


def _macs(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor, scale: int) -> int:
    """Multiply-accumulates of one call of ``module`` per image, measured on a probe batch at a
    size ``scale`` times smaller than the one it is counted for (module docstring)."""
    batch = output.shape[0]
    if isinstance(module, Attention):
        _, _, H, W = output.shape
        tokens = H * W * scale**2
        return module.num_heads * tokens * tokens * (module.key_dim + module.head_dim)
    return _probe_macs(module, inputs, output) // batch * scale**2


def _probe_macs(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> int:
    if isinstance(module, nn.Conv2d):
        kh, kw = module.kernel_size
        return output.numel() * (module.in_channels // module.groups) * kh * kw
    if isinstance(module, nn.ConvTranspose2d):
        kh, kw = module.kernel_size
        return inputs[0].numel() * (module.out_channels // module.groups) * kh * kw
    if isinstance(module, nn.Linear):
        return output.numel() * module.in_features
    return 0


def _cpu_zeros(model: YOLO26) -> dict[str, Tensor]:
    """Zeros on the CPU in the shape and dtype of every parameter and buffer of ``model``, by
    name: what :func:`torch.func.functional_call` runs the network with instead of its own."""
    tensors = itertools.chain(model.named_parameters(), model.named_buffers())
    return {name: torch.zeros(t.shape, dtype=t.dtype) for name, t in tensors}


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
        model: the network, on any device or ``meta`` (left unchanged: one forward runs it with
            CPU zeros in place of its parameters and buffers, its modes put back after).
        image_size: square input size in pixels, a multiple of the largest stride (640 for the
            published detect/segment/pose tables, 1024 for OBB).

    Returns:
        The totals and a per-submodule table.

    Raises:
        ModelConfigError: ``image_size`` is not a positive multiple of the largest stride.
    """
    probe_size = max(model.strides)
    if image_size <= 0 or image_size % probe_size:
        raise ModelConfigError(
            f"image_size={image_size!r} is not a positive multiple of {probe_size}; the network "
            f"takes square inputs whose side is a multiple of its largest stride ({probe_size})"
        )
    scale = image_size // probe_size
    macs: dict[nn.Module, int] = {}

    def hook(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
        macs[module] = macs.get(module, 0) + _macs(module, inputs, output, scale)

    modes = [(m, m.training) for m in model.modules()]
    handles: list[RemovableHandle] = [
        m.register_forward_hook(hook) for m in model.modules() if isinstance(m, _COUNTED)
    ]
    try:
        model.train()
        with torch.no_grad(), one_cpu_thread():
            # two images: training-mode BatchNorm needs more than one value per channel, and
            # the coarsest map has one cell per image
            functional_call(model, _cpu_zeros(model), (torch.zeros(2, 3, probe_size, probe_size),))
    finally:
        for handle in handles:
            handle.remove()
        for module, training in modes:
            module.training = training

    def gflops(module: nn.Module) -> float:
        return 2 * sum(macs.get(m, 0) for m in module.modules()) / 1e9

    training_only = [m for _, m in model.training_only_modules()]
    dropped = {id(m) for parent in training_only for m in parent.modules()}
    rows = [
        LayerRow(
            name,
            type(child).__name__,
            sum(p.numel() for p in child.parameters()),
            gflops(child),
            id(child) in dropped,
        )
        for name, child in _layer_rows(model)
    ]
    total = gflops(model)
    return ModelSummary(
        image_size=image_size,
        train_params=sum(p.numel() for p in model.parameters()),
        train_gflops=total,
        infer_params=_folded_params(model) - sum(_folded_params(m) for m in training_only),
        infer_gflops=total - sum(gflops(m) for m in training_only),
        layers=tuple(rows),
    )


__all__ = ["LayerRow", "ModelSummary", "model_summary"]
