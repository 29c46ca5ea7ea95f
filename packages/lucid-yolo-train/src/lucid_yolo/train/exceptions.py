"""The base of every error the training package raises on purpose.

The CLI catches :class:`TrainError` and prints its message as one line; anything else is a bug and
keeps its traceback. Each subpackage defines its own subclasses next to the code that raises them
(``data.errors``, ``optim.errors``, ``metrics``) so the message can name the file, line or option.
"""

from __future__ import annotations

__all__ = ["TrainConfigError", "TrainError"]


class TrainError(Exception):
    """Base class of the training package's typed errors; messages quote the value and the fix."""


class TrainConfigError(TrainError, ValueError):
    """An option of the module, trainer or data module that cannot be honoured as given."""
