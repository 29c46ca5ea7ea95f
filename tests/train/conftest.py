"""Shared fixtures of the train tests: tiny synthetic datasets, generated once per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lucid_yolo.train.data.synthetic import generate_synthetic


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny_dataset(task)`` → the ``data.yaml`` of 8 train / 4 val synthetic images at 128 px."""
    made: dict[str, Path] = {}

    def make(task: str) -> Path:
        if task not in made:
            root = tmp_path_factory.mktemp(f"tiny-{task}")
            made[task] = generate_synthetic(
                root,
                task=task,
                num_train=8,
                num_val=4,
                imgsz=128,
                seed=0,  # type: ignore[arg-type]
            )
        return made[task]

    return make
