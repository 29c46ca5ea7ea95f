"""Split a model's parameters into the weight-decay and no-decay groups YOLO training uses.

Decaying normalisation scales or biases pulls them towards zero for no regularisation benefit (they
do not set the model's capacity the way weight matrices do), so YOLO-style training decays only the
conv/linear weights. Biases get their own group as well because the warm-up schedule starts their
learning rate high (``warmup_bias_lr``) while every other group starts from zero.

Each group carries a ``"kind"`` string (``"bias"``, ``"norm"`` or ``"weight"``) that
:class:`~lucid_yolo.train.optim.schedule.WarmupLinearSchedule` reads. It is a plain string, not an
enum, so that optimiser state dicts stay loadable with ``torch.load(weights_only=True)``.
"""

from typing import Any

from torch import Tensor, nn

from lucid_yolo.train.optim.errors import OptimizerConfigError

__all__ = ["BIAS", "NORM", "WEIGHT", "param_groups"]

BIAS = "bias"
"""Group kind of parameters registered under the name ``bias``: no decay, warm-up from high lr."""
NORM = "norm"
"""Group kind of the other parameters with < 2 dims (BatchNorm/LayerNorm scales): no decay."""
WEIGHT = "weight"
"""Group kind of parameters with 2 or more dims (conv/linear weights): decayed, Muon-updated."""


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Group the trainable parameters of ``model`` by kind, in a fixed order.

    A parameter is a ``WEIGHT`` when it has at least 2 dims, else a ``BIAS`` when its attribute name
    is ``bias``, else a ``NORM``. Shared parameters appear once (at their first registration) and
    frozen ones (``requires_grad=False``) not at all; empty groups are dropped.

    Args:
        model: the network whose parameters are optimised.
        weight_decay: decay of the ``WEIGHT`` group; the other groups get 0.

    Returns:
        Param-group dicts in the order ``bias, norm, weight`` with keys ``params``, ``weight_decay``
        and ``kind``, ready for :class:`~lucid_yolo.train.optim.musgd.MuSGD` or any torch optimiser.

    Raises:
        OptimizerConfigError: when ``weight_decay`` is negative or the model has no trainable
            parameter.
    """
    if not weight_decay >= 0.0:
        raise OptimizerConfigError(f"weight_decay must be >= 0, got {weight_decay!r}")
    grouped: dict[str, list[Tensor]] = {BIAS: [], NORM: [], WEIGHT: []}
    seen: set[int] = set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            if p.ndim >= 2:
                grouped[WEIGHT].append(p)
            elif name == "bias":
                grouped[BIAS].append(p)
            else:
                grouped[NORM].append(p)
    if not seen:
        raise OptimizerConfigError(
            f"{type(model).__name__!r} has no trainable parameter; unfreeze some before training"
        )
    decay = {BIAS: 0.0, NORM: 0.0, WEIGHT: weight_decay}
    return [
        {"params": params, "weight_decay": decay[kind], "kind": kind}
        for kind, params in grouped.items()
        if params
    ]
