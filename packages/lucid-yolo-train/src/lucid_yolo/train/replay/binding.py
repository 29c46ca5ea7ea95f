"""Runs the network and the loss of a training step, and the evaluation forward, natively or
through replay recorders.

The regions (:mod:`lucid_yolo.train.replay.regions`) chain network → segment heads → loss, or
record the network and the loss as one region, and all their graphs share one memory pool,
which the update graph joins, and the evaluation graphs too unless ``evaluate_in_pool`` is off.
With no region enabled the network runs exactly as ``net(images)`` and the loss natively.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import cast

import torch
from torch import Tensor, nn

from lucid_yolo.models import YOLO26
from lucid_yolo.replay import (
    ForwardRecorder,
    PoolLeakError,
    RegionRecorder,
    ReplayPool,
    RetireReason,
    ScratchLoan,
    Telemetry,
    TensorSpec,
    merge_telemetry,
)
from lucid_yolo.train.data.batch import Batch
from lucid_yolo.train.exceptions import TrainConfigError
from lucid_yolo.train.memory_format import float_images, layout_stride
from lucid_yolo.train.replay.config import ReplayConfig
from lucid_yolo.train.replay.regions import (
    FEATURE_KEYS,
    SHAPE_ONLY_FIELDS,
    TOTAL,
    EvaluationRegion,
    LossRegion,
    NetworkLossRegion,
    NetworkRegion,
    SegmentHeadRegion,
    shape_carrier,
)


class NetworkReplay:
    """Runs the network and the loss natively or through their replay recorders.

    Args:
        net: the network.
        task: its task.
        config: which regions replay (``update`` and ``verify_every`` are the module's).
        criterion: the task loss; needed when ``config.loss``.

    Raises:
        TrainConfigError: ``config.segment_heads`` on a network without segment heads;
            ``config.loss`` without a criterion.
    """

    def __init__(
        self, net: YOLO26, task: str, config: ReplayConfig, criterion: nn.Module | None = None
    ) -> None:
        if config.loss and criterion is None:
            raise TrainConfigError("replay.loss=True needs the criterion to record")
        if config.segment_heads and net.protos is None:
            raise TrainConfigError(
                f"replay.segment_heads=True needs a segment model, got task {task!r}: "
                "use a -seg model or leave the option off"
            )
        self.net = net
        self.config = config
        self.criterion = criterion
        self.network: RegionRecorder | None = None
        self.segment_heads: RegionRecorder | None = None
        self.loss_recorder: RegionRecorder | None = None
        self.network_with_loss: RegionRecorder | None = None
        """The recorder of the network and the loss as one region
        (``config.joins_network_and_loss``), built on the first step, when the batch's fields
        are known."""
        self._pool: ReplayPool | None = None
        self.evaluation_loan: ScratchLoan | None = None
        """The step pool's free blocks lent to evaluation's eager work between replayed steps
        (``config.evaluate_in_pool``): the forward without ``config.evaluation``, a segment
        network's masks always (:meth:`evaluation_scratch`); ``None`` until the pool exists,
        when turned off, or with the forward replayed for a network without masks."""
        self.evaluation: ForwardRecorder | None = None
        """The evaluation forward's recorder (``config.evaluation``), built on the first
        evaluation call and again when the evaluated network's parameters moved."""
        self._earlier_evaluations = Telemetry()
        self._defer_evaluation = False
        self._network_region = NetworkRegion(net, include_segment_heads=not config.segment_heads)
        self._direct_gradients = False

    @property
    def direct_gradients(self) -> bool:
        """Whether the replayed backwards of the regions with parameters (the network, the
        segment heads, the network with its loss) write the parameters' ``.grad`` themselves
        (:class:`~lucid_yolo.replay.RegionRecorder`'s ``direct_gradients``): on for a fit in one
        process, where nothing but the step's own ``backward()`` reads the gradients' way to
        ``.grad``; off under DDP, whose hooks on the parameters' gradient accumulators
        all-reduce them. Applies from the next step."""
        return self._direct_gradients

    @direct_gradients.setter
    def direct_gradients(self, on: bool) -> None:
        self._direct_gradients = on
        for recorder in (self.network, self.segment_heads, self.network_with_loss):
            if recorder is not None:
                recorder.direct_gradients = on

    def images(
        self,
        raw: Tensor,
        memory_format: torch.memory_format = torch.contiguous_format,
        dtype: torch.dtype = torch.float32,
    ) -> Tensor:
        """Float images in [0, 1] for :meth:`__call__`, in ``memory_format`` and ``dtype``, bit
        for bit :func:`~lucid_yolo.train.memory_format.float_images`.

        Once the network region has recorded, they are built in its static input buffer
        (:meth:`~lucid_yolo.replay.RegionRecorder.static_input`), so the replay copies nothing
        in and the step holds one image batch instead of two (39.3 MB at batch 16, 640 px in
        bf16; issue 11, memory). The same copy and division as ``float_images`` follow.

        Args:
            raw: (B, 3, H, W) uint8 images, as the batch brings them, in any layout.
            memory_format: the layout of the result, the fit's one layout
                (:mod:`lucid_yolo.train.memory_format`), so the region's signature stays the
                same every step.
            dtype: the result's dtype (:func:`~lucid_yolo.train.memory_format.network_input_dtype`).
        """
        buffer = None
        recorder = self.network or self.network_with_loss
        if recorder is not None:
            shape = tuple(raw.shape)
            stride = layout_stride(shape, memory_format)
            spec = TensorSpec(shape, stride, dtype, raw.device, False)
            buffer = recorder.static_input(0, spec)
        if buffer is None:
            return float_images(raw, memory_format, dtype)
        with torch.no_grad():
            return buffer.copy_(raw).div_(255.0)

    def __call__(self, images: Tensor) -> dict[str, Tensor]:
        """Raw network outputs (:mod:`lucid_yolo.models.outputs`) for float images.

        Raises:
            TrainConfigError: ``config.joins_network_and_loss``, where the network replays only
                with its loss (:meth:`network_and_loss`); a forward alone would run natively
                unseen.
        """
        if self.config.joins_network_and_loss:
            raise TrainConfigError(
                "the network replays with its loss as one region (replay.loss_with_network, "
                "on by default where both replay): call NetworkReplay.network_and_loss, or set "
                "replay.loss_with_network false for the network alone"
            )
        if not (self.config.network or self.config.segment_heads):
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

    def evaluate(
        self, net: nn.Module, raw: Tensor, memory_format: torch.memory_format
    ) -> dict[str, Tensor]:
        """Raw outputs of ``net`` in eval mode for a batch's uint8 images
        (:class:`~lucid_yolo.train.replay.regions.EvaluationRegion`).

        With ``config.evaluation`` they come from the evaluation graphs and are borrowed: the
        next evaluation call rewrites them, and in the step's pool so may a training graph, so
        what is kept beyond the evaluation step is cloned. Otherwise the forward runs eagerly, in
        the pool's free blocks while the loan is open.
        """
        if not self.config.evaluation:
            loan = self.evaluation_loan
            with loan.borrowing() if loan is not None else contextlib.nullcontext():
                return EvaluationRegion(net, memory_format)(raw)
        recorder = self.evaluation
        if recorder is None or not _evaluates(recorder, net, memory_format):
            self._forget_evaluation()
            pool = self._pool_on(raw.device)
            self.evaluation = recorder = ForwardRecorder(
                EvaluationRegion(net, memory_format),
                name="evaluation",
                # recorded at the first call, unless start_evaluation holds it back through a
                # fit's sanity check until the training graphs are in the pool
                warmup_steps=0,
                max_signatures=self.config.max_signatures,
                pool=pool if self.config.evaluate_in_pool else ReplayPool(raw.device),
            )
        recorder.defer_recording = self._defer_evaluation
        return cast(dict[str, Tensor], recorder(raw))

    @contextlib.contextmanager
    def evaluation_scratch(self) -> Iterator[None]:
        """The context of evaluation's eager work on a batch's outputs (the metric's masks):
        the pool's free blocks while the loan is open, where a native fit's evaluation reuses
        what its training step freed. Whatever the work allocates there is freed before it
        ends, since the evaluation graphs replay between batches.

        Raises:
            PoolLeakError: the work kept a tensor it made there, with the option that turns
                the loan off.
        """
        loan = self.evaluation_loan
        if loan is None:
            yield
            return
        try:
            with loan.borrowing():
                yield
        except PoolLeakError as error:
            raise _naming_the_option(
                error,
                "the metric builds each validation batch's masks in the graphs' free memory and "
                "must let them go: copy what a batch keeps",
            ) from error

    def start_evaluation(self, *, before_training: bool = False) -> None:
        """An evaluation pass starts: forget an evaluation recording whose network's
        parameters moved since it was made (``Trainer.validate`` ends by moving the module to
        the CPU; the pass records the moved network afresh instead of retiring), then open the
        loan (the eager forward's, or the metric's masks' between replays). Checked once a
        pass, where a move can happen, not at every batch; forgotten first, so that the loan
        sees which graphs still hold the pool.

        Args:
            before_training: the pass comes before the fit's first training step (Lightning's
                sanity check). Where the step's graphs will share the evaluation's pool, the
                evaluation forward then runs natively, as a native fit's does, and records at
                the next pass, warming up and capturing in the free scratch of the training
                graphs recorded meanwhile: recorded first, its blocks would sit beneath the
                first training step's native activations, which cannot use them (issue 11,
                memory: the fit's peak).
        """
        self._defer_evaluation = (
            before_training
            and self.config.evaluate_in_pool
            and (self.config.regions or self.config.update)
        )
        recorder = self.evaluation
        if recorder is not None:
            problem = recorder.binding.check()
            if problem is not None and problem[0] is RetireReason.PARAMETER_REPLACED:
                self._forget_evaluation()
        if self.evaluation_loan is not None:
            self.evaluation_loan.open()

    def end_evaluation(self) -> None:
        """An evaluation pass ends, its metrics computed: take the loan's blocks back.

        Raises:
            PoolLeakError: a tensor the pass made in them is still alive (an eager forward's
                output kept by a subclass's evaluation, for example), with the option that
                turns the loan off.
        """
        if self.evaluation_loan is None:
            return
        try:
            self.evaluation_loan.close()
        except PoolLeakError as error:
            raise _naming_the_option(
                error,
                "an eager evaluation forward's outputs and the metric's masks are lent the "
                "graphs' memory only for their pass: clone what the pass keeps",
            ) from error

    def _forget_evaluation(self) -> None:
        """Drop the evaluation recorder (its graphs go with it), keeping its counters."""
        if self.evaluation is not None:
            self._earlier_evaluations = merge_telemetry(
                self._earlier_evaluations, self.evaluation.telemetry
            )
            self.evaluation = None

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
        criterion = self.criterion
        if not self.config.loss:
            return _criterion_loss(criterion, outputs, batch, fraction)
        fields = cast(dict[str, Tensor], batch)
        keys = (tuple(sorted(outputs)), tuple(sorted(fields)))
        if self.loss_recorder is None:
            self.loss_recorder = RegionRecorder(
                LossRegion(criterion, *keys),
                name="loss",
                max_signatures=self.config.max_signatures,
                pool=self._bind(fraction.device),
            )
        region = self.loss_recorder.region
        assert isinstance(region, LossRegion)
        return _replayed_loss(
            self.loss_recorder,
            "outputs and batch fields",
            keys,
            (region.output_keys, region.batch_keys),
            lambda: (*(outputs[k] for k in keys[0]), *_batch_tensors(fields, keys[1]), fraction),
            lambda: _criterion_loss(criterion, outputs, batch, fraction),
        )

    def network_and_loss(
        self, images: Tensor, batch: Batch, fraction: Tensor
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The loss ``(total, terms)`` of the network's outputs for ``images``, through the one
        region of both (``config.joins_network_and_loss``).

        Args:
            images: float network input (:meth:`images`).
            batch: the padded dense batch, on the images' device.
            fraction: ProgLoss progress, a 0-dim float32 device tensor.

        Raises:
            TrainConfigError: the network and its loss do not replay as one region.
        """
        if not self.config.joins_network_and_loss:
            raise TrainConfigError(
                "NetworkReplay.network_and_loss needs the network and its loss replayed as one "
                "region (replay.network and replay.loss, replay.loss_with_network not false, no "
                "replay.segment_heads): call the network and the loss apart otherwise"
            )
        assert self.criterion is not None, "the one region is checked to come with the loss"
        criterion, network = self.criterion, self._network_region
        fields = cast(dict[str, Tensor], batch)
        keys = tuple(sorted(fields))
        if self.network_with_loss is None:
            self.network_with_loss = RegionRecorder(
                NetworkLossRegion(network, criterion, keys),
                name="network+loss",
                max_signatures=self.config.max_signatures,
                pool=self._bind(images.device),
                direct_gradients=self._direct_gradients,
                # nothing of the pool runs between the step's forward and its backward
                frees_activations=True,
            )
        region = self.network_with_loss.region
        assert isinstance(region, NetworkLossRegion)
        return _replayed_loss(
            self.network_with_loss,
            "batch fields",
            keys,
            region.batch_keys,
            lambda: (images, *_batch_tensors(fields, keys), fraction),
            lambda: _criterion_loss(criterion, network(images), batch, fraction),
        )

    def shared_pool(self, device: torch.device) -> ReplayPool:
        """The one memory pool of every graph of the step, for the update graph and the
        device's pixel graphs (``YoloDataModule.follow_replay``) to join.

        Call it once the network sits on ``device`` (Lightning's ``configure_optimizers`` runs
        after the move); it builds the network recorders on the way.
        """
        return self._bind(device)

    def _pool_on(self, device: torch.device) -> ReplayPool:
        """The step's pool, made on first use, with the evaluation loan when it is on."""
        if self._pool is None:
            self._pool = ReplayPool(device)
            # with the forward replayed, only a segment network's masks have work to lend to;
            # an idle loan would still read the allocator's snapshot twice a pass
            borrower = not self.config.evaluation or self.net.protos is not None
            if self.config.evaluate_in_pool and borrower:
                self.evaluation_loan = ScratchLoan(
                    self._pool, replays_between=self.config.evaluation
                )
        return self._pool

    def _bind(self, device: torch.device) -> ReplayPool:
        """Build the network recorders in the step's pool on first use, once the network sits
        on its training device (a recording keys on parameter storage, which moving the network
        replaces: an evaluation before the fit, which ``Trainer.validate`` ends by moving the
        module to the CPU, makes the pool only); the loss recorder, and the network's with its
        loss (``config.joins_network_and_loss``), join the pool on their first call, when the
        batch's fields are known."""
        pool = self._pool_on(device)
        if self.config.network and not self.config.joins_network_and_loss and self.network is None:
            self.network = RegionRecorder(
                self._network_region,
                name="network",
                max_signatures=self.config.max_signatures,
                pool=pool,
                direct_gradients=self._direct_gradients,
            )
        if self.config.segment_heads and self.segment_heads is None:
            self.segment_heads = RegionRecorder(
                SegmentHeadRegion(self.net),
                name="segment-heads",
                max_signatures=self.config.max_signatures,
                pool=pool,
                direct_gradients=self._direct_gradients,
            )
        return pool

    def recorders(self) -> list[RegionRecorder]:
        """The region recorders in use (none when replay is off)."""
        recorders = (self.network, self.segment_heads, self.loss_recorder, self.network_with_loss)
        return [r for r in recorders if r is not None]

    @property
    def telemetry(self) -> Telemetry:
        """Summed counters of every recorder (all zero when replay is off)."""
        return merge_telemetry(*(r.telemetry for r in self.recorders()))

    @property
    def evaluation_telemetry(self) -> Telemetry:
        """Counters of the evaluation forward over the whole job, recorders built again after
        a move included (all zero when it does not replay)."""
        current = () if self.evaluation is None else (self.evaluation.telemetry,)
        return merge_telemetry(self._earlier_evaluations, *current)


def _batch_tensors(fields: Mapping[str, Tensor], keys: tuple[str, ...]) -> list[Tensor]:
    """The batch's fields in ``keys``' order as a loss region takes them: a zero-byte carrier
    of the fields the losses read only for their shape (:data:`SHAPE_ONLY_FIELDS`)."""
    return [shape_carrier(fields[k]) if k in SHAPE_ONLY_FIELDS else fields[k] for k in keys]


def _replayed_loss(
    recorder: RegionRecorder,
    keyed_on: str,
    keys: object,
    built_for: object,
    arguments: Callable[[], tuple[Tensor, ...]],
    native: Callable[[], tuple[Tensor, dict[str, Tensor]]],
) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss ``(total, terms)`` through ``recorder``, a region ending in the loss, or
    ``native`` with ``inputs-changed`` when the step's ``keys`` are not those the region was
    ``built_for`` (its arguments follow the keys' order)."""
    if keys != built_for:
        recorder.fall_back(
            RetireReason.INPUTS_CHANGED,
            f"the {recorder.name} region got {keyed_on} {keys!r} and was built for "
            f"{built_for!r}; this step's {recorder.name} runs natively",
        )
        return native()
    result = recorder(*arguments())
    assert isinstance(result, Mapping)
    prefix = "term."
    terms = {k.removeprefix(prefix): v for k, v in result.items() if k.startswith(prefix)}
    return result[TOTAL], terms


def _criterion_loss(
    criterion: nn.Module, outputs: dict[str, Tensor], batch: Batch, fraction: Tensor
) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss ``(total, terms)`` run natively."""
    total: Tensor
    terms: dict[str, Tensor]
    total, terms = criterion(outputs, batch, fraction)
    return total, terms


def _evaluates(
    recorder: ForwardRecorder, net: nn.Module, memory_format: torch.memory_format
) -> bool:
    """Whether ``recorder`` records ``net`` in ``memory_format`` (the fit's own)."""
    region = recorder.region
    return (
        isinstance(region, EvaluationRegion)
        and region.net is net
        and region.memory_format == memory_format
    )


def _naming_the_option(error: PoolLeakError, lent: str) -> PoolLeakError:
    """``error`` with what lucid-yolo lent the pool's blocks to and the option that turns the
    loan off."""
    return PoolLeakError(
        f"{error}. In lucid-yolo {lent}, or evaluate beside the graphs with "
        "--model.replay.evaluate_in_pool false"
    )


__all__ = ["NetworkReplay"]
