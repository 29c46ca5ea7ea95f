"""Which parts of a training step replay from CUDA graphs: one typed option group.

The module, the binding, the CLI (``--model.replay.network true``) and the tools all read this one
object, so a region is named in one place. Replay never changes a result (each region is bitwise
equal to native training), only how fast a step runs: the options are therefore not saved with a
checkpoint's hyperparameters, and a resumed fit replays what its own command line says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lucid_yolo.train.exceptions import TrainConfigError


@dataclass(frozen=True)
class ReplayConfig:
    """The replay regions of a training step and how they are checked.

    Attributes:
        network: replay the network's forward+backward (backbone, neck, dual head, and the
            segment heads unless ``segment_heads``).
        segment_heads: segment only: replay the prototype/semantic heads as a region of their
            own, chained after the network.
        loss: replay the loss (assignment and every term, forward and backward), chained after
            the network (every task; bitwise in all 72 parity-matrix cases on an H200), or with
            it as one region (``loss_with_network``).
        loss_with_network: record ``network`` and ``loss`` as one region
            (:class:`~lucid_yolo.train.replay.regions.NetworkLossRegion`): a replayed step then
            launches one forward and one backward graph for both instead of two each, and pays
            the host's work of one region (its identity check, signature, copies and autograd
            node) instead of two. The same operators run in the same order as the native step.
            ``None`` (the default) joins them wherever both replay and ``segment_heads``, which
            chains a region between the two, does not (:attr:`joins_network_and_loss`);
            ``False`` keeps the two regions chained; ``True`` insists, and is refused where it
            cannot apply.
        update: replay the MuSGD update and the EMA blend from one CUDA graph
            (:mod:`lucid_yolo.train.replay.update_step`).
        evaluation: replay the evaluation forward (validation, test: the image conversion and
            the EMA network) from CUDA graphs, one per batch shape
            (:class:`~lucid_yolo.replay.ForwardRecorder`): eagerly the host launches every layer's
            kernels one by one and the GPU waits on it. The same kernels run on the same inputs,
            so the metrics are the same bits. With ``evaluate_in_pool`` the forward's graphs are
            captured in the step's pool, in its free scratch; otherwise in a pool of their own.
            Their outputs are borrowed: a subclass whose evaluation keeps them beyond its step
            clones what it keeps (nothing raises: the next replay rewrites them). The metric's
            matching of each batch is replayed too, in a pool of its own, with the same matches
            (:class:`~lucid_yolo.train.metrics.match_replay.MatchReplay`, at most 64 graphs a
            device, apart from ``max_signatures``), and so is each batch's scoring before it
            (top-k, source pixels, and but for masks the order and overlaps:
            :class:`~lucid_yolo.train.scoring_replay.ScoringReplay`, at most 8 graphs a
            device), with the same bits.
        max_signatures: distinct input signatures recorded per region before further ones run
            natively (graph memory is held for good).
        verify_every: every N-th optimizer step also runs as a native shadow step and the two
            results are compared bitwise; the first difference retires every region with
            ``parity-mismatch`` (:mod:`lucid_yolo.train.replay.step_verifier`). ``0`` never
            verifies.
        evaluate_in_pool: while graphs hold the step's pool, evaluation's forward (validation,
            test) runs in the pool's free blocks between replayed steps instead of reserving
            its own memory beside them (:class:`~lucid_yolo.replay.ScratchLoan`), as a native
            fit's evaluation reuses what its training step freed: a lower peak
            (docs/engineering/whole-fit-speed.md, session 13). The same kernels run on the
            same inputs, so the metrics are the same bits. ``False``
            is for a subclass whose evaluation keeps the forward's outputs beyond its pass (the
            loan raises ``PoolLeakError`` at the pass's end). With ``evaluation`` the evaluation
            graphs take the pool's scratch instead, and the loan (``replays_between``) serves
            a segment network's metric masks only, batch by batch between the graphs'
            replays. Either way a segment fit's metric builds and scores each batch's masks, a
            pass's largest tensors, in the loan (issue 11, session 27).

    Raises:
        TrainConfigError: ``max_signatures`` below 1, a negative ``verify_every``, or
            ``loss_with_network`` true without ``network`` and ``loss`` or with
            ``segment_heads``.
    """

    EVALUATION_OPTIONS: ClassVar[tuple[str, ...]] = ("evaluation", "max_signatures")
    """The fields :meth:`for_evaluation` keeps."""

    network: bool = False
    segment_heads: bool = False
    loss: bool = False
    loss_with_network: bool | None = None
    update: bool = False
    evaluation: bool = False
    max_signatures: int = 4
    verify_every: int = 0
    evaluate_in_pool: bool = True

    def __post_init__(self) -> None:
        if self.max_signatures < 1:
            raise TrainConfigError(
                f"replay.max_signatures must be >= 1, got {self.max_signatures!r}"
            )
        if self.loss_with_network and not (self.network and self.loss):
            raise TrainConfigError(
                "replay.loss_with_network true records the network and the loss as one region: "
                "turn on replay.network and replay.loss with it, or leave it unset (it then "
                "joins them wherever both replay)"
            )
        if self.loss_with_network and self.segment_heads:
            raise TrainConfigError(
                "replay.loss_with_network cannot join the network and the loss around a "
                "segment-head region: leave replay.segment_heads off (the network region then "
                "runs the segment heads) or leave replay.loss_with_network unset (it then "
                "joins them only without a segment-head region)"
            )
        if self.verify_every < 0:
            raise TrainConfigError(
                f"replay.verify_every must be >= 0 (0 turns the verifier off), got "
                f"{self.verify_every!r}"
            )

    def for_evaluation(self) -> ReplayConfig:
        """The options that act in a run without training steps (``validate``, ``test``): the
        evaluation forward's replay and its signature limit; the rest at their defaults.

        Such a run records no training graph, so the pool the evaluation graphs would share
        holds none and ``evaluate_in_pool`` changes nothing there.
        """
        return ReplayConfig(**{name: getattr(self, name) for name in self.EVALUATION_OPTIONS})

    @property
    def joins_network_and_loss(self) -> bool:
        """Whether the network and its loss replay as one region: ``loss_with_network`` where
        given, otherwise wherever both replay without a segment-head region between them."""
        if self.loss_with_network is not None:
            return self.loss_with_network
        return self.network and self.loss and not self.segment_heads

    @property
    def regions(self) -> bool:
        """Whether a region of the forward/backward (network, segment heads, loss) replays."""
        return self.network or self.segment_heads or self.loss

    @property
    def graphs(self) -> bool:
        """Whether anything records CUDA graphs (a region, the update or the evaluation)."""
        return self.regions or self.update or self.evaluation


__all__ = ["ReplayConfig"]
