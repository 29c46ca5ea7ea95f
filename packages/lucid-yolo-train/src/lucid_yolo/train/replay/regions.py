"""The replay regions of a YOLO26 training step: which modules, which outputs, which groups.

Replay knows nothing about YOLO; these classes describe the network and the loss to it through
the :class:`lucid_yolo.replay.GroupedRegion` protocol, and run them through the model's own
forward parts (:meth:`YOLO26.features`, :meth:`YOLO26.predictions`,
:meth:`YOLO26.segment_outputs`), so a region computes exactly what ``net(images)`` does:

* the **network** (backbone, neck, dual head, and the segment heads unless they are a region of
  their own): its outputs split into the prediction groups ``o2m`` and ``o2o`` (their losses are
  independent) and ``shared`` (prototypes, semantic logits);
* the **segment heads** (prototypes and the training-only semantic branch), chained after the
  network: they read the neck's features, which then become network outputs that require grad;
* the **loss** (assigners and every loss term), chained after them: it reads the raw outputs and
  the batch tensors, returns the total and the detached terms, and its backward graph hands the
  outputs' gradients to the regions before it;
* the **network and its loss** as one region (``ReplayConfig.joins_network_and_loss``: by
  default wherever both replay without the segment heads' region): the same operators as the
  two chained, one forward and one backward graph for both;
* the **evaluation** forward (validation, test), a forward without autograd: the batch's uint8
  images made float network input, then the EMA network in eval mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from lucid_yolo.models import YOLO26
from lucid_yolo.models import outputs as keys
from lucid_yolo.train.exceptions import TrainConfigError
from lucid_yolo.train.memory_format import float_images, network_input_dtype

FEATURE_KEYS = ("features.p3", "features.p4", "features.p5")
"""Output keys of the neck's features when the segment heads are a region of their own."""

_TASK_OUTPUTS: dict[str, tuple[str, ...]] = {
    "detect": (),
    "segment": (keys.MASK_COEF,),
    "pose": (keys.KPT, keys.KPT_SCALE),
    "obb": (keys.ANGLE,),
}


def branch_groups(task: str) -> dict[str, list[str]]:
    """The ``o2m`` and ``o2o`` prediction groups of a task's head outputs."""
    names = (keys.BOX, keys.CLS, *_TASK_OUTPUTS[task])
    return {branch: [keys.branch_key(branch, n) for n in names] for branch in keys.BRANCHES}


class NetworkRegion:
    """The network up to its heads, as a :class:`~lucid_yolo.replay.GroupedRegion`.

    Args:
        net: the network.
        include_segment_heads: run the prototype/semantic heads inside this region; when
            ``False`` on a segment network, the neck's features are returned instead (keys
            :data:`FEATURE_KEYS`) for the segment-head region to consume.
    """

    def __init__(self, net: YOLO26, *, include_segment_heads: bool = True) -> None:
        self.net = net
        self.include_segment_heads = include_segment_heads or net.protos is None

    def __call__(self, images: Tensor) -> dict[str, Tensor]:
        features = self.net.features(images)
        result = self.net.predictions(features)
        if self.include_segment_heads:
            result.update(self.net.segment_outputs(features))
        else:
            result.update(zip(FEATURE_KEYS, features, strict=True))
        return result

    def region_modules(self) -> Sequence[nn.Module]:
        modules: list[nn.Module] = [self.net.backbone, self.net.neck, self.net.head]
        if self.net.protos is not None and self.include_segment_heads:
            modules.append(self.net.protos)
        return modules

    def prediction_groups(self) -> Mapping[str, Sequence[str]]:
        groups: dict[str, list[str]] = branch_groups(self.net.task)
        if self.net.protos is not None:
            groups["shared"] = (
                [keys.PROTOS, keys.SEMANTIC] if self.include_segment_heads else list(FEATURE_KEYS)
            )
        return groups


class EvaluationRegion:
    """The evaluation forward from the batch's uint8 images, as a
    :class:`~lucid_yolo.replay.Region`.

    The conversion to float input is part of the region, so that a recorded graph reads the
    uint8 batch (a quarter of the float32 input's bytes) and the float images are graph scratch.

    Args:
        net: the network evaluated (the EMA's).
        memory_format: the fit's one layout (:mod:`lucid_yolo.train.memory_format`).
    """

    def __init__(self, net: nn.Module, memory_format: torch.memory_format) -> None:
        self.net = net
        self.memory_format = memory_format

    def __call__(self, raw: Tensor) -> dict[str, Tensor]:
        dtype = network_input_dtype(raw.device)
        outputs: dict[str, Tensor] = self.net(float_images(raw, self.memory_format, dtype))
        return outputs

    def region_modules(self) -> Sequence[nn.Module]:
        """The evaluated network."""
        return (self.net,)


class SegmentHeadRegion:
    """The prototype head and its training-only semantic branch, over the neck's features."""

    def __init__(self, net: YOLO26) -> None:
        if net.protos is None:
            raise TrainConfigError(
                f"model task {net.task!r} has no segment heads: use a -seg model"
            )
        self.net = net
        self.protos = net.protos

    def __call__(self, *features: Tensor) -> dict[str, Tensor]:
        return self.net.segment_outputs(features)

    def region_modules(self) -> Sequence[nn.Module]:
        return (self.protos,)

    def prediction_groups(self) -> Mapping[str, Sequence[str]]:
        return {"protos": [keys.PROTOS], "semantic": [keys.SEMANTIC]}


TOTAL = "total"
"""Output key of the loss region's differentiable total; the terms follow as ``term.<name>``."""


SHAPE_ONLY_FIELDS = ("images",)
"""Batch fields the losses read only for their shape and device (``loss_base.py``,
``segment_loss.py``): the loss region gets a zero-byte carrier of their shape
(:func:`shape_carrier`) instead of a static copy, 19.7 MB of uint8 images at batch 16 and 640 px
(issue 11, memory)."""


def shape_carrier(field: Tensor) -> Tensor:
    """A tensor of no bytes that carries ``field``'s shape, dtype and device: shape + ``(0,)``."""
    return field.new_empty((*field.shape, 0))


def stand_in(carrier: Tensor) -> Tensor:
    """The field a carrier stands for: its shape, dtype and device, one element broadcast."""
    return torch.empty((), dtype=carrier.dtype, device=carrier.device).expand(carrier.shape[:-1])


class LossRegion:
    """The task loss as a region over the raw outputs, the batch tensors and the progress.

    Every argument is a tensor, so one recording serves the whole run: the ProgLoss progress is
    a 0-dim device tensor (a Python float would be baked into the graph). The fields named in
    :data:`SHAPE_ONLY_FIELDS` come as :func:`shape_carrier` tensors and reach the criterion as
    :func:`stand_in` tensors of the right shape whose values are undefined.

    Args:
        criterion: the task loss (``loss(outputs, batch, epoch_fraction) -> (total, terms)``).
        output_keys: the raw output keys, in the order they are passed.
        batch_keys: the batch keys, in the order they are passed after the outputs.
    """

    def __init__(
        self, criterion: nn.Module, output_keys: Sequence[str], batch_keys: Sequence[str]
    ) -> None:
        self.criterion = criterion
        self.output_keys = tuple(output_keys)
        self.batch_keys = tuple(batch_keys)

    def __call__(self, *tensors: Tensor) -> dict[str, Tensor]:
        n = len(self.output_keys)
        outputs = dict(zip(self.output_keys, tensors[:n], strict=True))
        return loss_terms(self.criterion, self.batch_keys, outputs, tensors[n:])

    def region_modules(self) -> Sequence[nn.Module]:
        return (self.criterion,)


def loss_terms(
    criterion: nn.Module,
    batch_keys: Sequence[str],
    outputs: dict[str, Tensor],
    tensors: Sequence[Tensor],
) -> dict[str, Tensor]:
    """A loss region's outputs: the criterion's total and terms on ``outputs`` against the batch
    fields (``tensors`` in ``batch_keys``' order, :data:`SHAPE_ONLY_FIELDS` as carriers) and the
    progress (``tensors``' last)."""
    m = len(batch_keys)
    batch = dict(zip(batch_keys, tensors[:m], strict=True))
    for key in SHAPE_ONLY_FIELDS:
        if key in batch:
            batch[key] = stand_in(batch[key])
    total, terms = criterion(outputs, batch, tensors[m])
    return {TOTAL: total, **{f"term.{name}": value for name, value in terms.items()}}


class NetworkLossRegion:
    """The network and its loss as one region: from the images and the batch to the total and
    the terms.

    Chained as two regions, a replayed step pays the host's work of a region twice over, in
    its forward and in its backward: the identity check, the signature, the copy-in, the
    launch, and autograd's node between them (issue 11, session 34). As one region the graphs
    run the same operators in the same order as ``net(images)`` followed by the loss, so the
    bits are those of the native step; the network's outputs never leave the graph.

    Args:
        network: the network region (with its segment heads, if any).
        criterion: the task loss.
        batch_keys: the batch keys, in the order they are passed after the images.
    """

    def __init__(
        self, network: NetworkRegion, criterion: nn.Module, batch_keys: Sequence[str]
    ) -> None:
        self.network = network
        self.criterion = criterion
        self.batch_keys = tuple(batch_keys)

    def __call__(self, images: Tensor, *tensors: Tensor) -> dict[str, Tensor]:
        return loss_terms(self.criterion, self.batch_keys, self.network(images), tensors)

    def region_modules(self) -> Sequence[nn.Module]:
        return (*self.network.region_modules(), self.criterion)


__all__ = [
    "FEATURE_KEYS",
    "SHAPE_ONLY_FIELDS",
    "TOTAL",
    "EvaluationRegion",
    "LossRegion",
    "NetworkLossRegion",
    "NetworkRegion",
    "SegmentHeadRegion",
    "branch_groups",
    "loss_terms",
]
