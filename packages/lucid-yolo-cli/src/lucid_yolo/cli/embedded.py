"""The embedded synthetic datasets: generated once per task into the user cache folder.

``--data.yaml synthetic`` (the quickstart default) names them. Generation is deterministic, so a
dataset found complete in the cache is reused; an interrupted generation is redone because the
marker file is written last.
"""

from __future__ import annotations

from pathlib import Path

from lucid_yolo.models import TASKS, Task
from lucid_yolo.train.data.resources import user_cache_dir
from lucid_yolo.train.data.synthetic import generate_synthetic

SYNTHETIC = "synthetic"
"""The ``--data.yaml`` value that selects the embedded dataset of the model's task."""

VERSION = 2
"""Bumped when the generator's output changes (2: OBB box corners kept inside the image), so that
a stale cached dataset is not reused."""
NUM_TRAIN = 64
NUM_VAL = 16
IMAGE_SIZE = 320


def embedded_dataset(task: str, root: Path | None = None) -> Path:
    """The ``data.yaml`` of the embedded synthetic dataset of ``task``, generated if missing."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}: expected one of {TASKS!r}")
    checked: Task = task
    folder = (root or user_cache_dir()) / f"synthetic-{checked}-v{VERSION}"
    marker = folder / ".complete"
    if not marker.is_file():
        generate_synthetic(
            folder, task=checked, num_train=NUM_TRAIN, num_val=NUM_VAL, imgsz=IMAGE_SIZE, seed=0
        )
        marker.write_text("ok\n", encoding="utf-8")
    return folder / "data.yaml"


__all__ = ["SYNTHETIC", "embedded_dataset"]
