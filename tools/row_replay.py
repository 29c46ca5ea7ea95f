"""What issue 11's benchmark rows replay: one home for every tool that replays a fit as they do.

``bench_side_by_side.py`` (so ``gpu_speed.sh`` and every row built on it) and ``bench_scaling.py``
pass these to ``lucid-yolo fit`` as flags; the tools that profile a row's fit in their own process
(``bench_replay_memory.py``, ``profile_validation.py --replay-training``, ``find_host_syncs.py``)
build the module's ``ReplayConfig`` from the same fields. Session 44 changed the rows' replay and
had to say it again in five places; here it is said once. This module imports nothing, so the
side-by-side process, which imports neither trainer, can read it.
"""

from __future__ import annotations

from collections.abc import Mapping

ROW_REPLAY: Mapping[str, bool] = {
    "network": True,
    "loss": True,
    "update": True,
    "evaluation": True,
}
"""The ``ReplayConfig`` fields the rows turn on: the network (a segment net's heads in it) and its
loss as one region, the update, and the evaluation forward. Until session 44 the segment row also
set ``segment_heads``, which keeps the network, the heads and the loss three chained regions: the
same speed and a peak 0.13 GiB higher (docs/engineering/whole-fit-speed.md, session 44)."""

TRAINING_REPLAY: Mapping[str, bool] = {
    name: on for name, on in ROW_REPLAY.items() if name != "evaluation"
}
"""The rows' replay of the training step alone, for the tools that time steps, not validation."""


def replay_flags(fields: Mapping[str, bool] = ROW_REPLAY) -> list[str]:
    """``lucid-yolo fit`` flags that turn on ``fields``' regions."""
    return [f"--model.replay.{name}=true" for name, on in fields.items() if on]


__all__ = ["ROW_REPLAY", "TRAINING_REPLAY", "replay_flags"]
