"""Whether an object sits in CPython's permanent generation, where ``gc.freeze()`` puts it.

Read from the object's absence from ``gc.get_objects()``, which lists every tracked object of
the collected generations: ``gc.get_freeze_count()`` cannot say it, since CPython 3.12 also keeps
the immortal objects a collection meets in that generation (375 in a fresh interpreter).
"""

from __future__ import annotations

import gc


def is_frozen(obj: object) -> bool:
    """Whether ``obj`` is frozen; ``obj`` must be a container the collector tracks."""
    assert gc.is_tracked(obj), f"{type(obj).__name__} is not tracked: absence would prove nothing"
    return not any(o is obj for o in gc.get_objects())
