"""ProgLoss: the one-to-many / one-to-one balance moves linearly over training.

The one-to-many branch (``topk`` positives per instance) gives a dense, stable signal early on;
the one-to-one branch (one positive per instance) is what the end-to-end, NMS-free model uses at
inference. The total loss is ``w * L(o2m) + (1 - w) * L(o2o)`` with ``w`` going linearly from
0.8 at the first epoch to 0.1 at the last, so training ends focused on the deployed branch.
"""

from __future__ import annotations

from torch import Tensor

from lucid_yolo.train.exceptions import TrainConfigError

O2M_WEIGHT_START = 0.8
O2M_WEIGHT_END = 0.1


def epoch_fraction(epoch: int, epochs: int) -> float:
    """Position of ``epoch`` (0-based) in a run of ``epochs``: 0.0 first, 1.0 last.

    Raises:
        TrainConfigError: when ``epochs < 1`` or ``epoch`` is outside ``[0, epochs)``.
    """
    if epochs < 1:
        raise TrainConfigError(f"epochs={epochs!r}: a run has at least one epoch")
    if not 0 <= epoch < epochs:
        raise TrainConfigError(f"epoch={epoch!r} is outside [0, {epochs}); epochs are 0-based")
    return epoch / (epochs - 1) if epochs > 1 else 0.0


def o2m_weight_at(
    fraction: float | Tensor, start: float = O2M_WEIGHT_START, end: float = O2M_WEIGHT_END
) -> float | Tensor:
    """Weight ``w`` of the one-to-many loss at a point of training.

    Args:
        fraction: progress in ``[0, 1]`` (:func:`epoch_fraction`, or a finer per-step value).
            Inside a CUDA graph pass a 0-dim device tensor: a Python float would be baked into
            the recording.
        start: ``w`` at the start.
        end: ``w`` at the end.

    Returns:
        ``start + (end - start) * fraction``, a float or a tensor like ``fraction``.
    """
    return start + (end - start) * fraction


def o2m_weight(
    epoch: int, epochs: int, start: float = O2M_WEIGHT_START, end: float = O2M_WEIGHT_END
) -> float:
    """Weight ``w`` of the one-to-many loss at ``epoch`` (0-based) of ``epochs``.

    Example:
        >>> o2m_weight(0, 11), round(o2m_weight(10, 11), 6)
        (0.8, 0.1)
    """
    return start + (end - start) * epoch_fraction(epoch, epochs)


__all__ = ["O2M_WEIGHT_END", "O2M_WEIGHT_START", "epoch_fraction", "o2m_weight", "o2m_weight_at"]
