"""Lines the trainer writes for the person running it: one home, on stdout, from rank zero.

A run's story (what the data side chose, which imported tensors were kept, where a SIGTERM
checkpoint went) is what a user reads to trust the run, so it goes to stdout beside the CLI's
own lines and the validation tables; stderr is kept for warnings and errors, and
``lucid-yolo fit > run.log`` keeps the whole story in one file. Lightning's rank-zero INFO
logger is not used for these: it writes to stderr, and the CLI hides Lightning's INFO lines
(:mod:`lucid_yolo.cli.quiet`), which hid ours with them. Under DDP only rank zero prints, so a
line appears once per run.
"""

from __future__ import annotations

from lightning.pytorch.utilities import rank_zero_only


@rank_zero_only
def print_line(line: str) -> None:
    """Print ``line`` on stdout, flushed, from the rank-zero process only."""
    print(line, flush=True)


__all__ = ["print_line"]
