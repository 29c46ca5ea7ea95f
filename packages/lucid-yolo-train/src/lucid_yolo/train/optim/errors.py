"""Typed errors of the optimisation package.

They subclass :class:`ValueError` so that callers that already catch bad configuration values keep
working, while tests and the CLI can match the precise kind.
"""

from lucid_yolo.train.exceptions import TrainError

__all__ = ["OptimizerConfigError", "OptimizerStateError"]


class OptimizerConfigError(TrainError, ValueError):
    """A hyperparameter or parameter grouping that the optimiser, schedule or EMA cannot honour."""


class OptimizerStateError(TrainError, ValueError):
    """A state dict or a model that does not match the object it is loaded into or applied to."""
