"""Checkpoints written before the replay options became one group (``--model.replay.*``).

With ``--ckpt_path`` LightningCLI parses the checkpoint's saved hyperparameters as model options.
A checkpoint written before the change still names the four ``capture_*`` flags,
``max_signatures`` and ``verify_every`` there, and the parser would refuse them as if the user
had typed them. Replay changes no weight and is no longer saved with a checkpoint, so those keys
can simply go; this check says so, with the command that drops them, before the parser reads the
file. (:meth:`YoloModule.load_from_checkpoint` and ``export`` skip unknown keys and load such a
checkpoint unchanged.)
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

from lucid_yolo.cli.errors import CliError

RETIRED_MODEL_OPTIONS = (
    "capture_network",
    "capture_segment_heads",
    "capture_loss",
    "capture_update",
    "max_signatures",
    "verify_every",
)
"""Model hyperparameters of older checkpoints that are now ``replay.*`` and not saved."""


def retired_options(path: str | Path) -> list[str]:
    """The retired model options saved in the checkpoint ``path`` (none for an unreadable file:
    the commands that load it say what is wrong with it)."""
    file = Path(path).expanduser()
    if not file.is_file():
        return []
    try:
        raw: Any = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError, ValueError):
        return []
    hparams = raw.get("hyper_parameters") if isinstance(raw, dict) else None
    if not isinstance(hparams, dict):
        return []
    return [key for key in RETIRED_MODEL_OPTIONS if key in hparams]


def check_replay_options(path: str | Path) -> None:
    """Refuse a checkpoint whose hyperparameters hold retired replay options, saying the fix.

    Raises:
        CliError: the checkpoint names one of :data:`RETIRED_MODEL_OPTIONS`.
    """
    found = retired_options(path)
    if not found:
        return
    drop = (
        "import sys, torch; p = sys.argv[1]; c = torch.load(p, weights_only=True); "
        f"[c['hyper_parameters'].pop(k) for k in {tuple(found)!r}]; torch.save(c, p)"
    )
    raise CliError(
        f"--ckpt_path {str(path)!r} was written before the replay options became "
        f"--model.replay.*: its hyperparameters hold {', '.join(map(repr, found))}. Replay "
        "changes no weight and is no longer saved with a checkpoint; drop those keys once with\n"
        f'    python -c "{drop}" {path}'
    )


__all__ = ["RETIRED_MODEL_OPTIONS", "check_replay_options", "retired_options"]
