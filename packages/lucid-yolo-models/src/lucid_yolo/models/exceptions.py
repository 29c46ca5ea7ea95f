"""Typed errors of :mod:`lucid_yolo.models`.

Each names the bad value and the fix, so a wrong model name or argument fails before any tensor
is allocated.
"""

from __future__ import annotations


class ModelError(ValueError):
    """Base class of every error raised by :mod:`lucid_yolo.models`."""


class UnknownModelError(ModelError, KeyError):
    """A model name that the registry does not hold."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ModelConfigError(ModelError):
    """An argument that cannot build a network (class count, keypoint shape, image size...)."""


class ExportError(ModelError):
    """The ONNX export could not be produced or checked."""


class WeightsError(ModelError):
    """A weights file that cannot be read safely, or that does not fit the network it is loaded
    into (another task or scale, an unknown layout, a global a checkpoint has no business naming).
    """


__all__ = ["ExportError", "ModelConfigError", "ModelError", "UnknownModelError", "WeightsError"]
