"""Binds the replay regions of a YOLO26 network: which modules, which outputs, which groups.

Replay knows nothing about YOLO; this module describes the network to it through the
:class:`lucid_yolo.replay.GroupedRegion` protocol. Two regions can be recorded:

* the **network** (backbone, neck, dual head, and the segment heads unless they are a region of
  their own): its outputs split into the prediction groups ``o2m`` and ``o2o`` (their losses are
  independent) and ``shared`` (prototypes, semantic logits);
* the **segment heads** (prototypes and the training-only semantic branch), chained after the
  network: they read the neck's features, which then become network outputs that require grad,
  and both regions share one memory pool;
* the **loss** (assigners and every loss term), chained after them: it reads the raw outputs and
  the batch tensors, returns the total and the detached terms, and its backward graph hands the
  outputs' gradients to the regions before it.

With no region enabled the network runs exactly as ``net(images)`` and the loss natively.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from lucid_yolo.models import YOLO26
from lucid_yolo.models import outputs as keys
from lucid_yolo.replay import RegionRecorder, ReplayPool, RetireReason, Telemetry, merge_telemetry
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.exceptions import TrainConfigError

FEATURE_KEYS = ("features.p3", "features.p4", "features.p5")
"""Output keys of the neck's features when the segment heads are a region of their own."""

_TASK_OUTPUTS: dict[str, tuple[str, ...]] = {
    "detect": (),
    "segment": (keys.MASK_COEF,),
    "pose": (keys.KPT, keys.KPT_SCALE),
    "obb": (keys.ANGLE,),
}


@dataclass(frozen=True)
class ReplayOptions:
    """Which regions replay and how.

    Attributes:
        capture_network: record the network region.
        capture_segment_heads: segment only: record the prototype/semantic heads as their own
            region.
        capture_loss: record the loss (assignment and terms, forward and backward).
        max_signatures: recordings per region before further signatures run native.
    """

    capture_network: bool = False
    capture_segment_heads: bool = False
    capture_loss: bool = False
    max_signatures: int = 4

    def __post_init__(self) -> None:
        if self.max_signatures < 1:
            raise TrainConfigError(f"max_signatures must be >= 1, got {self.max_signatures!r}")


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
        features = self.net.neck(*self.net.backbone(images))
        result: dict[str, Tensor] = dict(self.net.head(features))
        if self.net.protos is None:
            return result
        if self.include_segment_heads:
            result.update(SegmentHeadRegion(self.net)(*features))
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


class SegmentHeadRegion:
    """The prototype head and its training-only semantic branch, over the neck's features."""

    def __init__(self, net: YOLO26) -> None:
        if net.protos is None:
            raise TrainConfigError(
                f"model task {net.task!r} has no segment heads: use a -seg model"
            )
        self.protos = net.protos

    def __call__(self, *features: Tensor) -> dict[str, Tensor]:
        protos, semantic = self.protos(list(features))
        result = {keys.PROTOS: protos}
        if semantic is not None:
            result[keys.SEMANTIC] = semantic
        return result

    def region_modules(self) -> Sequence[nn.Module]:
        return (self.protos,)

    def prediction_groups(self) -> Mapping[str, Sequence[str]]:
        return {"protos": [keys.PROTOS], "semantic": [keys.SEMANTIC]}


LOSS_REPLAY_TASKS = ("detect",)
"""Tasks whose loss region has been compared bitwise with native training on a GPU."""

TOTAL = "total"
"""Output key of the loss region's differentiable total; the terms follow as ``term.<name>``."""


class LossRegion:
    """The task loss as a region over the raw outputs, the batch tensors and the progress.

    Every argument is a tensor, so one recording serves the whole run: the ProgLoss progress is
    a 0-dim device tensor (a Python float would be baked into the graph).

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
        n, m = len(self.output_keys), len(self.batch_keys)
        outputs = dict(zip(self.output_keys, tensors[:n], strict=True))
        batch = dict(zip(self.batch_keys, tensors[n : n + m], strict=True))
        total, terms = self.criterion(outputs, batch, tensors[n + m])
        return {TOTAL: total, **{f"term.{name}": value for name, value in terms.items()}}

    def region_modules(self) -> Sequence[nn.Module]:
        return (self.criterion,)


class NetworkReplay:
    """Runs the network and the loss natively or through their replay recorders.

    Args:
        net: the network.
        task: its task.
        options: which regions replay.
        criterion: the task loss; needed when ``options.capture_loss``.

    Raises:
        TrainConfigError: ``capture_segment_heads`` on a network without segment heads;
            ``capture_loss`` without a criterion or for a task not in :data:`LOSS_REPLAY_TASKS`.
    """

    def __init__(
        self, net: YOLO26, task: str, options: ReplayOptions, criterion: nn.Module | None = None
    ) -> None:
        if options.capture_loss and criterion is None:
            raise TrainConfigError("capture_loss=True needs the criterion to record")
        if options.capture_loss and task not in LOSS_REPLAY_TASKS:
            raise TrainConfigError(
                f"capture_loss=True is verified bitwise for {LOSS_REPLAY_TASKS!r} only, not "
                f"{task!r} (a segment fit with the loss replayed differed from native on an "
                "H200; pose and OBB are not yet compared): leave it off for this task"
            )
        if options.capture_segment_heads and net.protos is None:
            raise TrainConfigError(
                f"capture_segment_heads=True needs a segment model, got task {task!r}: "
                "use a -seg model or leave the option off"
            )
        self.net = net
        self.options = options
        self.criterion = criterion
        self.network: RegionRecorder | None = None
        self.segment_heads: RegionRecorder | None = None
        self.loss_recorder: RegionRecorder | None = None
        self._pool: ReplayPool | None = None
        self._network_region = NetworkRegion(
            net, include_segment_heads=not options.capture_segment_heads
        )

    @property
    def enabled(self) -> bool:
        """Whether any region replays."""
        options = self.options
        return options.capture_network or options.capture_segment_heads or options.capture_loss

    def __call__(self, images: Tensor) -> dict[str, Tensor]:
        """Raw network outputs (:mod:`lucid_yolo.models.outputs`) for float images."""
        if not (self.options.capture_network or self.options.capture_segment_heads):
            result: dict[str, Tensor] = self.net(images)
            return result
        self._bind(images.device)
        if self.network is not None:
            outputs = dict(self.network(images))  # type: ignore[arg-type]
        else:
            outputs = self._network_region(images)
        if self.segment_heads is not None:
            features = [outputs.pop(k) for k in FEATURE_KEYS]
            outputs.update(self.segment_heads(*features))  # type: ignore[arg-type]
        return outputs

    def loss(
        self, outputs: dict[str, Tensor], batch: Batch, fraction: Tensor
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The loss ``(total, terms)``: natively, or through the loss region's recorder.

        Args:
            outputs: raw network outputs.
            batch: the padded dense batch, on the outputs' device.
            fraction: ProgLoss progress, a 0-dim float32 device tensor.
        """
        assert self.criterion is not None, "NetworkReplay.loss needs the criterion"
        if not self.options.capture_loss:
            total: Tensor
            terms: dict[str, Tensor]
            total, terms = self.criterion(outputs, batch, fraction)
            return total, terms
        fields = cast(dict[str, Tensor], batch)
        output_keys, batch_keys = tuple(sorted(outputs)), tuple(sorted(fields))
        if self.loss_recorder is None:
            self.loss_recorder = RegionRecorder(
                LossRegion(self.criterion, output_keys, batch_keys),
                name="loss",
                max_signatures=self.options.max_signatures,
                pool=self._bind(fraction.device),
            )
        region = self.loss_recorder.region
        assert isinstance(region, LossRegion)
        if (region.output_keys, region.batch_keys) != (output_keys, batch_keys):
            self.loss_recorder.fall_back(
                RetireReason.INPUTS_CHANGED,
                f"the loss got outputs {output_keys!r} and batch fields {batch_keys!r}, its "
                f"region was built for {region.output_keys!r} and {region.batch_keys!r}; this "
                "step's loss runs natively",
            )
            total, terms = self.criterion(outputs, batch, fraction)
            return total, terms
        result = self.loss_recorder(
            *(outputs[k] for k in output_keys), *(fields[k] for k in batch_keys), fraction
        )
        assert isinstance(result, Mapping)
        prefix = "term."
        terms = {k.removeprefix(prefix): v for k, v in result.items() if k.startswith(prefix)}
        return result[TOTAL], terms

    def shared_pool(self, device: torch.device) -> ReplayPool:
        """The one memory pool of every graph of the step, for the update graph to join.

        Call it once the network sits on ``device`` (Lightning's ``configure_optimizers`` runs
        after the move); it builds the network recorders on the way.
        """
        return self._bind(device)

    def _bind(self, device: torch.device) -> ReplayPool:
        """Build the network recorders and their shared pool on first use, once the network sits
        on its training device (a recording keys on parameter storage, which moving the network
        replaces); the loss recorder joins the pool on its first call."""
        if self._pool is not None:
            return self._pool
        pool = self._pool = ReplayPool(device)
        if self.options.capture_network:
            self.network = RegionRecorder(
                self._network_region,
                name="network",
                max_signatures=self.options.max_signatures,
                pool=pool,
            )
        if self.options.capture_segment_heads:
            self.segment_heads = RegionRecorder(
                SegmentHeadRegion(self.net),
                name="segment-heads",
                max_signatures=self.options.max_signatures,
                pool=pool,
            )
        return pool

    def recorders(self) -> list[RegionRecorder]:
        """The region recorders in use (none when replay is off)."""
        return [r for r in (self.network, self.segment_heads, self.loss_recorder) if r is not None]

    @property
    def telemetry(self) -> Telemetry:
        """Summed counters of every recorder (all zero when replay is off)."""
        return merge_telemetry(*(r.telemetry for r in self.recorders()))


__all__ = [
    "FEATURE_KEYS",
    "LOSS_REPLAY_TASKS",
    "TOTAL",
    "LossRegion",
    "NetworkRegion",
    "NetworkReplay",
    "ReplayOptions",
    "SegmentHeadRegion",
    "branch_groups",
]
