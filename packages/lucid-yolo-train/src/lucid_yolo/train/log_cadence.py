"""When a value logged during training reaches anything: the loggers' steps and the epoch's end.

Lightning hands step metrics to the loggers only every ``log_every_n_steps`` optimizer steps (50
by default), and the epoch's summary reads the last value logged; values logged on other steps
reach nothing but a progress bar. A ``LightningModule.log`` call costs the host about 0.7 ms
(session 29's host split of replayed fits on the H200), which a host-bound replayed step pays in
full, so what no progress bar shows is logged only when it reaches something.
"""

from __future__ import annotations

import lightning.pytorch as pl


def reaches_loggers(trainer: pl.Trainer, step: int, batch_idx: int) -> bool:
    """Whether a value logged by a batch of optimizer step ``step`` (counted from 1; every
    micro-batch of a step has its number) and batch ``batch_idx`` of the epoch reaches the loggers
    or the epoch's summary: a logging step (none when ``log_every_n_steps`` is 0, as Lightning
    has it), a stopping trainer, the epoch's last batch or the fit's last step."""
    every: int = trainer.log_every_n_steps  # type: ignore[attr-defined]  # set at run time
    return (
        (every > 0 and step % every == 0)
        or trainer.should_stop
        or batch_idx + 1 >= trainer.num_training_batches
        or step == trainer.max_steps
    )


__all__ = ["reaches_loggers"]
