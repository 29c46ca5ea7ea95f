"""How many target rows each training image gets (the ``Batch``'s ``N``): as asked, or the most
instances a training sample can hold.

Every training image is padded to ``N`` rows, so that shapes stay static for CUDA graphs, and the
loss's label assignment works on (batch, ``N``, anchors) tensors, so ``N`` sets much of the
loss's work and memory (and a segment row carries a quarter-resolution mask). A training sample
never holds more instances than the split's largest image times the factors of the augmentations
that join or copy instances (:func:`~lucid_yolo.train.data.augment.pipeline.instance_factors`).
With ``N`` at least that bound no instance is ever cut, and the padded rows are masked out of
every loss term, so a fit is bit for bit the fit with any larger ``N``: the four tasks' CPU fits
with ``N`` of 100, 48 and 24 gave the same weights and losses, and so did bf16 fits of the four
with every region replayed on an H200, 100 rows against the automatic choice
(``tools/max_instances_parity.py``; ``tests/train/data/test_target_rows.py``).
``max_instances=None`` therefore takes that bound, at most :data:`AUTO_MAX_ROWS`, the earlier
fixed default, whose cut a crowded set keeps.
"""

from __future__ import annotations

from dataclasses import dataclass

from lucid_yolo.train.data.augment.config import AugmentConfig
from lucid_yolo.train.data.augment.pipeline import instance_factors
from lucid_yolo.train.data.dataset_yaml import Task

AUTO_MAX_ROWS = 100
"""The most rows ``max_instances=None`` chooses: beyond it the largest instances are kept and the
rest counted as overflow, as with the earlier fixed default of 100."""


@dataclass(frozen=True)
class RowsChoice:
    """Target rows per training image, and the sentence the data module prints about them."""

    rows: int
    reason: str


def choose_target_rows(
    requested: int | None, largest: int, augment: AugmentConfig, task: Task
) -> RowsChoice:
    """``requested`` when given, else the most instances a training sample can hold.

    Args:
        requested: ``max_instances`` as configured; ``None`` chooses.
        largest: instances of the split's largest image.
        augment: the training augmentation.
        task: the dataset's task (copy-paste only copies segment instances).
    """
    if requested is not None:
        return RowsChoice(requested, "as asked")
    factors = instance_factors(augment, segment=task == "segment")
    bound = largest
    for factor in factors.values():
        bound *= factor
    steps = "".join(f" x{factor} ({step})" for step, factor in factors.items())
    held = f"{largest} in the largest image{steps} = {bound}"
    if bound <= AUTO_MAX_ROWS:
        return RowsChoice(
            max(1, bound),
            f"the most a sample can hold: {held}; set max_instances to choose",
        )
    return RowsChoice(
        AUTO_MAX_ROWS,
        f"at most {AUTO_MAX_ROWS}: a sample can hold {held}, its largest {AUTO_MAX_ROWS} are kept; "
        "set max_instances to keep more",
    )


__all__ = ["AUTO_MAX_ROWS", "RowsChoice", "choose_target_rows"]
