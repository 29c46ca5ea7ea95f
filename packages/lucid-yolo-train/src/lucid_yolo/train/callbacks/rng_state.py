"""The random generators' state saved in checkpoints and put back where the fit stopped.

Lightning saves neither the global torch generator (CPU and CUDA) nor NumPy's or Python's, so a
resumed fit draws from ``seed_everything``'s fresh state, not from where the interrupted fit was.
This callback saves all four with every checkpoint and restores them just before the first
training batch after the restore: what a resume runs before that batch (a sanity check, the rest
of an interrupted validation, a user's callback) may draw from them, and a restore at load time
would be consumed by it (issue 15, resume bitwise).

The other half of the contract: what the uninterrupted fit runs between writing the checkpoint
and that batch must not draw from them either, or the two fits would part there. The data
module's loaders therefore seed their workers from a generator of their own, not the global one
(:class:`~lucid_yolo.train.data.datamodule.YoloDataModule`).
"""

from __future__ import annotations

import random
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override


def rng_state() -> dict[str, Any]:
    """Every global generator's state, as tensors and plain values (``weights_only`` loadable)."""
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    version, words, python_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.array(keys, dtype=np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "python": {"version": version, "words": list(words), "gauss": python_gauss},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    saved = state["numpy"]
    np.random.set_state(
        (
            saved["kind"],
            saved["keys"].numpy().astype(np.uint32),
            saved["position"],
            saved["has_gauss"],
            saved["gauss"],
        )
    )
    python = state["python"]
    random.setstate((python["version"], tuple(python["words"]), python["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class RngState(Callback):
    """Save the generators with each checkpoint; restore them at the first batch of a resume.

    Notes:
        ``state_dict`` fires when a checkpoint is written; ``load_state_dict`` when a fit is
        resumed, before the model is set up; ``on_train_batch_start`` before each training
        batch, and only its first call after a restore sets the generators.
    """

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    @override
    def state_dict(self) -> dict[str, Any]:
        return rng_state()

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._pending is not None:
            set_rng_state(self._pending)
            self._pending = None


__all__ = ["RngState", "rng_state", "set_rng_state"]
