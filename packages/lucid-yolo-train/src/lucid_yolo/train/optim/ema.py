"""The trainer's weight EMA: :class:`lucid_yolo.replay.ModelEMA` with the trainer's options.

Validation and checkpoints use the averaged weights: they are smoother than the last iterate and
typically score higher. The average itself has one implementation, in the replay package; this
module fixes the two options that change its bits, as the trainer has always run them:

- ``decay_on="device"``: the update count and the decay live on the model's device, so the blend
  is self-contained and the update step (:mod:`lucid_yolo.train.update_step`) records it in the
  same CUDA graph as the MuSGD update, with no value computed on the host between the two.
- ``buffers="copy"``: BatchNorm running statistics are already averages over batches, so they
  are copied rather than averaged a second time.

The blend must run once per applied optimiser update, not per micro-batch: under gradient
accumulation the weights only change on the last micro-batch, and blending on every micro-batch
would over-weight unchanged weights and advance the ramp too fast. The update step runs it right
after each applied update, so a step that fp16's GradScaler skips blends nothing either.
"""

from __future__ import annotations

from torch import nn

from lucid_yolo.replay import ModelEMA, ReplayConfigError
from lucid_yolo.train.optim.errors import OptimizerConfigError

__all__ = ["trainer_ema"]


def trainer_ema(model: nn.Module, *, decay: float = 0.9999, tau: float = 2000.0) -> ModelEMA:
    """The EMA the trainer validates and checkpoints, blended by the update step.

    Args:
        model: the trained network, already on its device (or call ``rebind`` after a move).
        decay: asymptotic decay, in ``[0, 1]``.
        tau: ramp length in optimizer updates; ``0`` disables the ramp.

    Returns:
        An EMA with the count and decay on the model's device, buffers copied, and no graph of
        its own (the update step records it).

    Raises:
        OptimizerConfigError: for ``decay`` outside ``[0, 1]`` or a negative ``tau``.
    """
    try:
        return ModelEMA(
            model, decay=decay, tau=tau, decay_on="device", buffers="copy", graphed=False
        )
    except ReplayConfigError as error:
        raise OptimizerConfigError(f"EMA {error}") from error
