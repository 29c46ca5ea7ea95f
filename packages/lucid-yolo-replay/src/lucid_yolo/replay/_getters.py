"""C-level getters that the per-step checks map over tensor lists, outside the Python loop."""

from __future__ import annotations

from functools import partial
from operator import attrgetter, is_not

GRAD = attrgetter("grad")
"""``t.grad`` of a tensor."""
REQUIRES_GRAD = attrgetter("requires_grad")
"""``t.requires_grad`` of a tensor."""
IS_SET = partial(is_not, None)
"""Whether an entry of a registry (a gradient, a parameter slot) holds a tensor."""

__all__ = ["GRAD", "IS_SET", "REQUIRES_GRAD"]
