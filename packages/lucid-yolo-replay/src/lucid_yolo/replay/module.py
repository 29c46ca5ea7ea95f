"""Level 2: an ``nn.Module`` wrapper that records its module after warm-up and replays it.

The wrapper is transparent for training code: calling it is calling the module, in grad mode it
records and replays through a :class:`~lucid_yolo.replay.recorder.RegionRecorder`, under
``no_grad`` (validation, inference) it runs the module natively.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from lucid_yolo.replay.pool import ReplayPool
from lucid_yolo.replay.protocols import ModuleRegion, RegionOutput
from lucid_yolo.replay.recorder import RegionRecorder
from lucid_yolo.replay.telemetry import Telemetry


class ReplayModule(nn.Module):
    """Wrap ``module`` so that its training forward and backward replay from CUDA graphs.

    The wrapped module is registered as ``module`` (its state-dict keys gain the ``module.``
    prefix; save ``wrapper.module`` to keep the original keys).

    Args:
        module: the module to record.
        groups: prediction groups of a mapping output (see
            :class:`~lucid_yolo.replay.protocols.GroupedRegion`).
        pool: shared memory pool; ``None`` makes a private one.
        **recorder_options: passed to :class:`~lucid_yolo.replay.recorder.RegionRecorder`
            (``warmup_steps``, ``capture_warmup``, ``max_signatures``, ``clone_outputs``,
            ``enabled``, ``name``).

    Example:
        >>> net = ReplayModule(Net().cuda())  # doctest: +SKIP
        >>> loss = criterion(net(images), targets)  # doctest: +SKIP
        >>> loss.backward()  # doctest: +SKIP
    """

    def __init__(
        self,
        module: nn.Module,
        groups: Mapping[str, Sequence[str]] | None = None,
        pool: ReplayPool | None = None,
        **recorder_options: Any,
    ) -> None:
        super().__init__()
        self.module = module
        # Held outside nn.Module's registries: the recorder is bookkeeping, not state.
        object.__setattr__(
            self,
            "recorder",
            RegionRecorder(ModuleRegion(module, groups), pool=pool, **recorder_options),
        )

    recorder: RegionRecorder

    def forward(self, *inputs: Any) -> RegionOutput:
        """Call the module: replayed in grad mode once recorded, else native."""
        return self.recorder(*inputs)

    @property
    def telemetry(self) -> Telemetry:
        """Counters of the recorder."""
        return self.recorder.telemetry


__all__ = ["ReplayModule"]
